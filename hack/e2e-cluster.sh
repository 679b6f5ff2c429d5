#!/usr/bin/env bash
# The cluster side of E2E_CLUSTER=external (docs/e2e.md): the journeys' users and the test models.
#
#   hack/e2e-cluster.sh users            ServiceAccounts alice, bob and carol standing in for people
#   hack/e2e-cluster.sh admin [SUB_NS]   ServiceAccount e2e-admin, a maas-api administrator (it may create
#                                        MaaSAuthPolicies in the subscription namespace, default
#                                        models-as-a-service): the usage journey's E2E_ADMIN_TOKEN_FILE
#   hack/e2e-cluster.sh token USER       print a token of USER (alice, bob, carol or admin): the token hook
#                                        (E2E_TOKEN_COMMAND="hack/e2e-cluster.sh token")
#   hack/e2e-cluster.sh models [IMAGE]   deploy the test models (manifests/e2e; needs nodes), default image
#                                        quay.io/opendatahub/maasctl:dev
#   hack/e2e-cluster.sh env              print `export E2E_...` lines for users and models (eval them)
#   hack/e2e-cluster.sh delete           remove users and test models
#
# ServiceAccounts cannot join arbitrary groups, but each is in system:serviceaccounts:<its namespace>: alice
# lives in maas-e2e-premium-users, bob in maas-e2e-free-users, carol in maas-e2e-users, and E2E_GROUPS maps
# the journeys' groups onto those namespaces' groups. Tokens: E2E_TOKEN_DURATION (default 2h) and
# E2E_TOKEN_AUDIENCES (comma-separated; default the API server's), e.g. add the gateway host when Authorino
# reviews tokens for that audience. Uses the current kubeconfig and kubectl (or KUBECTL), like hack/deploy.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy.sh"  # its helper functions only

MODELS_NS=maas-e2e-models
declare -A USER_NS=([alice]=maas-e2e-premium-users [bob]=maas-e2e-free-users [carol]=maas-e2e-users)
declare -A SA_NAME=([alice]=alice [bob]=bob [carol]=carol [admin]=e2e-admin)
USER_NS[admin]=maas-e2e-users

users() {
  local user
  for user in alice bob carol; do
    printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {app.kubernetes.io/part-of: maasctl-e2e}}\n---\n' \
      "${USER_NS[$user]}"
    printf 'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s, namespace: %s}\n---\n' "$user" "${USER_NS[$user]}"
  done | apply_stream >/dev/null
  log "users: alice (${USER_NS[alice]}), bob (${USER_NS[bob]}), carol (${USER_NS[carol]})"
}

admin() {
  local sub_ns="${1:-models-as-a-service}"
  k get namespace "$sub_ns" >/dev/null 2>&1 || die "subscription namespace $sub_ns does not exist"
  apply_stream >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: ${USER_NS[admin]}, labels: {app.kubernetes.io/part-of: maasctl-e2e}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ${SA_NAME[admin]}, namespace: ${USER_NS[admin]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: maas-e2e-admin, namespace: $sub_ns, labels: {app.kubernetes.io/part-of: maasctl-e2e}}
rules:
- {apiGroups: [maas.opendatahub.io], resources: [maasauthpolicies], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: maas-e2e-admin, namespace: $sub_ns, labels: {app.kubernetes.io/part-of: maasctl-e2e}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: maas-e2e-admin}
subjects:
- {kind: ServiceAccount, name: ${SA_NAME[admin]}, namespace: ${USER_NS[admin]}}
YAML
  log "administrator: ServiceAccount ${USER_NS[admin]}/${SA_NAME[admin]} (maas-api admin through $sub_ns)"
}

token() {
  local user="${1:-}" args=()
  [[ -n "$user" && -n "${SA_NAME[$user]:-}" ]] || die "token: USER must be alice, bob, carol or admin"
  local audience
  IFS=',' read -r -a audiences <<< "${E2E_TOKEN_AUDIENCES:-}"
  for audience in "${audiences[@]}"; do
    [[ -n "$audience" ]] && args+=(--audience "$audience")
  done
  k create token "${SA_NAME[$user]}" -n "${USER_NS[$user]}" --duration "${E2E_TOKEN_DURATION:-2h}" "${args[@]}"
}

models() {
  local image="${1:-quay.io/opendatahub/maasctl:dev}"
  k get namespace "$MODELS_NS" >/dev/null 2>&1 || k create namespace "$MODELS_NS" >/dev/null
  if ! k get secret e2e-upstream-key -n "$MODELS_NS" >/dev/null 2>&1; then
    k create secret generic e2e-upstream-key -n "$MODELS_NS" \
      --from-literal=api-key="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >/dev/null
  fi
  k kustomize "$MANIFESTS/e2e" | sed "s|image: quay.io/opendatahub/maasctl:dev|image: ${image}|" | apply_stream >/dev/null
  log "test models e2e-provider and e2e-incluster in $MODELS_NS (image $image)"
  if [[ "$(k get nodes -o name 2>/dev/null | wc -l)" -gt 0 ]]; then
    k rollout status -n "$MODELS_NS" deployment/e2e-provider deployment/e2e-incluster --timeout=300s
  fi
}

env_lines() {
  local me groups
  me="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
  groups="premium-users=system:serviceaccounts:${USER_NS[alice]},free-users=system:serviceaccounts:${USER_NS[bob]}"
  printf 'export E2E_TOKEN_COMMAND=%q\n' "$me token"
  printf 'export E2E_GROUPS=%q\n' "$groups"
  if k get serviceaccount "${SA_NAME[admin]}" -n "${USER_NS[admin]}" >/dev/null 2>&1; then
    # A fresh token in a private temporary file, written when the line is evaluated.
    printf 'export E2E_ADMIN_TOKEN_FILE="$(f="$(umask 077 && mktemp)" && %q token admin > "$f" && echo "$f")"\n' "$me"
  fi
  if k get secret e2e-upstream-key -n "$MODELS_NS" >/dev/null 2>&1; then
    local svc="svc.cluster.local:8000"
    printf 'export E2E_MODEL_URL=%q\n' "http://e2e-provider.$MODELS_NS.$svc"
    printf 'export E2E_INCLUSTER_MODEL_URL=%q\n' "http://e2e-incluster.$MODELS_NS.$svc"
    # The key itself is never printed: the line reads it when it is evaluated.
    printf 'export E2E_UPSTREAM_KEY="$(%s get secret e2e-upstream-key -n %s -o jsonpath={.data.api-key} | base64 -d)"\n' \
      "${KUBECTL:-kubectl}" "$MODELS_NS"
  fi
}

delete() {
  k delete namespace --ignore-not-found --timeout=300s "${USER_NS[alice]}" "${USER_NS[bob]}" "${USER_NS[carol]}" "$MODELS_NS"
  k delete role,rolebinding -A -l app.kubernetes.io/part-of=maasctl-e2e --ignore-not-found
}

case "${1:-}" in
  users) users ;;
  admin) admin "${2:-}" ;;
  token) token "${2:-}" ;;
  models) models "${2:-}" ;;
  env) env_lines ;;
  delete) delete ;;
  -h|--help|"") sed -n '2,22p' "$0"; [[ -n "${1:-}" ]] ;;
  *) die "unknown command: $1 (see --help)" ;;
esac
