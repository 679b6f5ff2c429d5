#!/usr/bin/env bash
# Install (or upgrade) maasctl into the cluster of the current kubeconfig. Idempotent: server-side apply.
#
#   hack/deploy.sh [--overlay NAME|DIR] [--database-url URL] [--ledger-url URL] [--redis-url URL]
#                  [--no-wait-pods] [--timeout SECONDS] [--dry-run]
#
#   --overlay        manifests/overlays/<NAME> or a directory with a kustomization.yaml (default: default)
#   --database-url   create/update Secret maas-api-db (key database-url) with this URL (env MAAS_DATABASE_URL)
#   --ledger-url     create/update Secret billing-ledger (key ledger-url), the billing ledger the psp-connector
#                    credits payments to (env MAAS_BILLING_LEDGER_URL)
#   --redis-url      create/update Secrets maas-payload-processor-redis and maas-console-redis (key redis-url): the
#                    existing Redis the payload processor keeps token counters in and the console's replicas
#                    share sessions in (separate keys), e.g. redis://:PASSWORD@redis:6379/0 (env MAAS_REDIS_URL)
#   --no-wait-pods   do not wait for the Deployments to become Available (clusters without nodes, CI)
#   --timeout        seconds to wait for CRDs, admission policy and Deployments (default 300)
#   --dry-run        server-side dry run: validate everything, change nothing
#
# Prerequisites: Gateway API and Kuadrant CRDs (the install has an HTTPRoute and an AuthPolicy); KServe's
# LLMInferenceService is optional. KUBECTL may name another kubectl, e.g. "$(maasctl testenv build) kubectl".
set -euo pipefail

# ---- shared with hack/uninstall.sh and hack/install-examples.sh, which source this file for these only ----

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MANIFESTS="$REPO_ROOT/manifests"
FIELD_MANAGER="maasctl-install"
read -r -a KUBECTL_CMD <<< "${KUBECTL:-kubectl}"

k() { "${KUBECTL_CMD[@]}" "$@"; }
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# An overlay name (manifests/overlays/<name>) or a directory holding a kustomization.yaml.
resolve_overlay() {
  local o="$1"
  if [[ -f "$o/kustomization.yaml" ]]; then (cd "$o" && pwd); return; fi
  [[ -f "$MANIFESTS/overlays/$o/kustomization.yaml" ]] || die "no overlay '$o' (manifests/overlays/* or a directory)"
  echo "$MANIFESTS/overlays/$o"
}

# The name of the Namespace labelled maas.opendatahub.io/namespace-role=<role> in a rendered stream (stdin).
# Kustomize prints fields sorted, so a Namespace document is apiVersion/kind/metadata{labels,name}.
namespace_with_role() {
  awk -v role="$1" '
    /^---/ { if (isns && hasrole) { found = 1; exit } isns = 0; hasrole = 0; name = ""; next }
    /^kind: Namespace$/ { isns = 1 }
    $0 ~ "maas.opendatahub.io/namespace-role: " role "$" { hasrole = 1 }
    /^  name: / { name = $2 }
    END { if (found || (isns && hasrole)) print name }'
}

# The API bundle (CRDs + admission policy) with the admission policy bound to this subscription namespace.
render_api_bundle() {
  local sub_ns="$1"
  k kustomize "$MANIFESTS" | sed \
    -e "s/'''models-as-a-service'''/'''${sub_ns}'''/" \
    -e "s/subscription namespace models-as-a-service\$/subscription namespace ${sub_ns}/"
}

apply_stream() {
  k apply --server-side --force-conflicts --field-manager="$FIELD_MANAGER" -f - "$@"
}

# apply_stream, repeated while the API server refuses objects of a kind it installed a moment ago with 503
# "Resource kind ... not found. There can be a delay between when CustomResourceDefinitions are created and when
# they are available" (an admission policy's view of the schema lags the CRD's Established condition; nothing
# was written). At most 30 tries, a second apart; any other failure fails at once. Server-side apply makes the
# repeat idempotent.
apply_stream_when_served() {
  local input out try=1
  input="$(mktemp)"
  cat > "$input"
  while true; do
    if out="$(apply_stream "$@" < "$input" 2>&1)"; then
      printf '%s\n' "$out"
      rm -f "$input"
      return 0
    fi
    if [[ "$out" != *"There can be a delay between when CustomResourceDefinitions are created"* ]] \
        || [[ $try -ge 30 ]]; then
      printf '%s\n' "$out" >&2
      rm -f "$input"
      return 1
    fi
    log "the API server does not serve a kind installed a moment ago yet: applying again (try $try of 30)"
    try=$((try + 1))
    sleep 1
  done
}

# Sourced: only the functions above.
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then return 0; fi
# ----------------------------------------------------------------------------------------------------------

overlay=default
database_url="${MAAS_DATABASE_URL:-}"
ledger_url="${MAAS_BILLING_LEDGER_URL:-}"
redis_url="${MAAS_REDIS_URL:-}"
wait_pods=1
timeout=300
dry_run=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --overlay) overlay="$2"; shift 2 ;;
    --overlay=*) overlay="${1#*=}"; shift ;;
    --database-url) database_url="$2"; shift 2 ;;
    --database-url=*) database_url="${1#*=}"; shift ;;
    --ledger-url) ledger_url="$2"; shift 2 ;;
    --ledger-url=*) ledger_url="${1#*=}"; shift ;;
    --redis-url) redis_url="$2"; shift 2 ;;
    --redis-url=*) redis_url="${1#*=}"; shift ;;
    --no-wait-pods) wait_pods=0; shift ;;
    --timeout) timeout="$2"; shift 2 ;;
    --timeout=*) timeout="${1#*=}"; shift ;;
    --dry-run) dry_run=(--dry-run=server); shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

overlay_dir="$(resolve_overlay "$overlay")"
rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
k kustomize "$overlay_dir" > "$rendered"
controller_ns="$(namespace_with_role controller < "$rendered")"
subscription_ns="$(namespace_with_role subscriptions < "$rendered")"
[[ -n "$controller_ns" && -n "$subscription_ns" ]] || die "overlay $overlay_dir renders no controller/subscription Namespace"
log "cluster: $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
log "overlay: $overlay_dir (controller namespace $controller_ns, subscription namespace $subscription_ns)"

for crd in httproutes.gateway.networking.k8s.io authpolicies.kuadrant.io; do
  k get crd "$crd" >/dev/null 2>&1 || die "prerequisite CRD $crd is missing (install Gateway API and Kuadrant first)"
done

log "applying the MaaS API (CRDs, admission policy)"
render_api_bundle "$subscription_ns" | apply_stream "${dry_run[@]}"
if [[ ${#dry_run[@]} -eq 0 ]]; then
  k wait --for=condition=Established --timeout="${timeout}s" -f "$MANIFESTS/crds/"
  got="$(k get validatingadmissionpolicy maas-subscription-namespace -o jsonpath='{.spec.variables[0].expression}')"
  [[ "$got" == "'$subscription_ns'" ]] || die "admission policy bound to $got, expected '$subscription_ns'"
fi

log "applying the controller, maas-api, the payload processor, the billing operator, the psp-connector and their RBAC"
if [[ ${#dry_run[@]} -eq 0 ]]; then
  apply_stream < "$rendered"
else
  # A dry run cannot create the namespaces, so namespaced objects are validated only where they exist.
  apply_stream "${dry_run[@]}" < "$rendered" || log "dry run: some objects need the namespaces created first"
fi

# The controller's finalizer at admission (Kubernetes 1.36+): one write fewer per new MaaSModelRef and
# MaaSSubscription. Installed with the controller (uninstall.sh removes it first) and only where served.
if k api-resources --api-group=admissionregistration.k8s.io -o name 2>/dev/null | grep -qx \
    'mutatingadmissionpolicies.admissionregistration.k8s.io'; then
  log "applying the finalizer admission policy"
  apply_stream "${dry_run[@]}" < "$MANIFESTS/finalizers/maas-finalizers.yaml"
else
  log "the cluster has no MutatingAdmissionPolicy API: the controller adds its finalizer itself"
fi

if [[ -n "$database_url" ]]; then
  log "writing Secret $controller_ns/maas-api-db"
  k create secret generic maas-api-db -n "$controller_ns" --from-literal=database-url="$database_url" \
      --dry-run=client -o yaml | apply_stream "${dry_run[@]}"
fi

if [[ -n "$ledger_url" ]]; then
  log "writing Secret $controller_ns/billing-ledger"
  k create secret generic billing-ledger -n "$controller_ns" --from-literal=ledger-url="$ledger_url" \
    --dry-run=client -o yaml | apply_stream "${dry_run[@]}"
fi

if [[ -n "$redis_url" ]]; then
  for secret in maas-payload-processor-redis maas-console-redis; do
    log "writing Secret $controller_ns/$secret"
    k create secret generic "$secret" -n "$controller_ns" --from-literal=redis-url="$redis_url" \
      --dry-run=client -o yaml | apply_stream "${dry_run[@]}"
  done
fi

# The console's session key (signs cookies, seals sessions), the same for every replica: created once, an
# existing key is kept (a new one signs everybody out).
if k get namespace "$controller_ns" >/dev/null 2>&1 \
    && ! k get secret maas-console-session -n "$controller_ns" >/dev/null 2>&1; then
  log "writing Secret $controller_ns/maas-console-session"
  k create secret generic maas-console-session -n "$controller_ns" \
    --from-literal=secret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
    --dry-run=client -o yaml | apply_stream "${dry_run[@]}"
fi

# The gateway's credential on maas-api's /internal/v1/* (closed by default): one random token, in the
# controller namespace (mounted by maas-api) and in Authorino's namespace (AuthPolicy sharedSecretRef).
# Created once; an existing token is kept (rotate by editing both Secrets).
authorino_ns="${AUTHORINO_NAMESPACE:-kuadrant-system}"
gateway_token=""
if k get secret maas-api-gateway-token -n "$controller_ns" >/dev/null 2>&1; then
  gateway_token="$(k get secret maas-api-gateway-token -n "$controller_ns" -o jsonpath='{.data.token}' | base64 -d)"
fi
[[ -n "$gateway_token" ]] || gateway_token="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
for ns in "$controller_ns" "$authorino_ns"; do
  if k get namespace "$ns" >/dev/null 2>&1; then
    log "writing Secret $ns/maas-api-gateway-token"
    k create secret generic maas-api-gateway-token -n "$ns" --from-literal=token="$gateway_token" \
      --dry-run=client -o yaml | apply_stream "${dry_run[@]}"
  else
    log "namespace $ns does not exist: create Secret maas-api-gateway-token there with the same token"
  fi
done

if [[ ${#dry_run[@]} -gt 0 ]]; then
  log "dry run complete: nothing was changed"
  exit 0
fi

log "waiting for the Deployments"
for d in maas-controller maas-api maas-payload-processor maas-console; do
  k get deployment "$d" -n "$controller_ns" >/dev/null
done
nodes="$(k get nodes -o name 2>/dev/null | wc -l)"
if [[ $wait_pods -eq 1 && "$nodes" -gt 0 ]]; then
  k rollout status deployment/maas-controller deployment/maas-api -n "$controller_ns" --timeout="${timeout}s"
  k wait --for=condition=Available --timeout="${timeout}s" -n "$controller_ns" \
    deployment/maas-controller deployment/maas-api
elif [[ $wait_pods -eq 1 ]]; then
  log "the cluster has no nodes: the Deployments exist but get no pods (use --no-wait-pods to skip this note)"
fi

has_secret=1
k get secret maas-api-db -n "$controller_ns" >/dev/null 2>&1 || has_secret=0
has_ledger=1
k get secret billing-ledger -n "$controller_ns" >/dev/null 2>&1 || has_ledger=0
has_redis=1
k get secret maas-payload-processor-redis -n "$controller_ns" >/dev/null 2>&1 || has_redis=0
console_redis=1  # 0: the dev overlay keeps sessions in the process; 2: the Secret is missing
k get deployment maas-console -n "$controller_ns" -o jsonpath='{.spec.template.spec.containers[0].env[*].name}' \
  | grep -qw MAASCTL_CONSOLE_REDIS_URL || console_redis=0
if [[ $console_redis -eq 1 ]]; then
  k get secret maas-console-redis -n "$controller_ns" >/dev/null 2>&1 || console_redis=2
fi

cat <<EOF

maasctl is installed (controller namespace $controller_ns, subscription namespace $subscription_ns).

Next steps:
EOF
if [[ $has_secret -eq 0 ]]; then
  cat <<EOF
  * maas-api needs its database: kubectl -n $controller_ns create secret generic maas-api-db \\
      --from-literal=database-url=postgresql+asyncpg://USER:PASSWORD@HOST:5432/maas \\
      --from-literal=key-pepper=\$(openssl rand -hex 32)
    (or re-run with --database-url URL)
EOF
fi
if [[ $has_ledger -eq 0 ]]; then
  cat <<EOF
  * The psp-connector (payments) needs the billing ledger: kubectl -n $controller_ns create secret generic \\
      billing-ledger --from-literal=ledger-url=postgresql+asyncpg://USER:PASSWORD@HOST:5432/billing
    (the ledger \`maasctl billing run --ledger-url\` writes; or re-run with --ledger-url URL)
EOF
fi
if [[ $has_redis -eq 0 ]]; then
  cat <<EOF
  * The payload processor (metering, provider keys, guardrails in the gateway) needs an existing Redis:
      kubectl -n $controller_ns create secret generic maas-payload-processor-redis \\
      --from-literal=redis-url=redis://:PASSWORD@HOST:6379/0
    (or re-run with --redis-url URL); until then its pods do not start and model requests are refused
EOF
fi
if [[ $console_redis -eq 2 ]]; then
  cat <<EOF
  * The console's replicas share sessions in Redis: kubectl -n $controller_ns create secret generic \\
      maas-console-redis --from-literal=redis-url=redis://:PASSWORD@HOST:6379/0
    (or re-run with --redis-url URL); until then its pods do not start
EOF
fi
cat <<EOF
  * The console:            https://$(k get httproute maas-console -n "$controller_ns" -o jsonpath='{.spec.hostnames[0]}')
                            (install-config consoleHostname; members of consoleAdminGroup are its administrators)
  * Payload processor wiring (condition PayloadProcessorWired on each managed Gateway):
      kubectl get gateway -A -o custom-columns='NAME:.metadata.name,WIRED:.status.conditions[?(@.type=="PayloadProcessorWired")].reason'
  * Check the controller:   kubectl -n $controller_ns get deploy,pods -l app.kubernetes.io/part-of=maasctl
                            kubectl -n $controller_ns logs deploy/maas-controller
  * Sample resources:       hack/install-examples.sh   (MaaSModelRef, MaaSAuthPolicy, MaaSSubscriptions)
  * Subscriptions and auth policies go in namespace $subscription_ns; a MaaSModelRef lives next to its model.
  * Dashboards and alerts:  manifests/observability/ (Grafana dashboard, PrometheusRule)
  * Uninstall:              hack/uninstall.sh [--all]
EOF
