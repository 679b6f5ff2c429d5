#!/usr/bin/env bash
# Remove what hack/deploy.sh installed. Idempotent: objects already gone are skipped.
#
#   hack/uninstall.sh [--overlay NAME|DIR] [--examples] [--all] [--timeout SECONDS]
#
# Default: removes the controller, maas-api, the billing operator, the psp-connector, their Services,
# ServiceAccounts, RBAC, gateway route and AuthPolicy. Keeps the MaaS API (CRDs + admission policy), the
# subscription namespace, the Secrets deploy.sh wrote (maas-api-db, billing-ledger, maas-api-gateway-token)
# and every MaaS resource users created, so a later deploy picks them up again.
#   --examples  also remove the sample resources of hack/install-examples.sh
#   --all       also delete every MaaS resource (through the running controller, so generated routes and
#               policies are cleaned up; objects it cannot finalize within --timeout lose the finalizer and
#               their generated objects are deleted by label), the CRDs, the admission policy and the
#               subscription namespace.
# The controller namespace itself is never deleted: it may be shared (e.g. with Open Data Hub).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy.sh"  # its helper functions only

overlay=default
all=0
examples=0
timeout=120
while [[ $# -gt 0 ]]; do
  case "$1" in
    --overlay) overlay="$2"; shift 2 ;;
    --overlay=*) overlay="${1#*=}"; shift ;;
    --all) all=1; examples=1; shift ;;
    --examples) examples=1; shift ;;
    --timeout) timeout="$2"; shift 2 ;;
    --timeout=*) timeout="${1#*=}"; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

MAAS_KINDS="maassubscriptions.maas.opendatahub.io,maasauthpolicies.maas.opendatahub.io,maasmodelrefs.maas.opendatahub.io,externalmodels.maas.opendatahub.io"
# The reference's kinds maasctl converts: deleted first, or the controller generates their ExternalModels again.
INFERENCE_KINDS="externalmodels.inference.opendatahub.io,externalproviders.inference.opendatahub.io"

overlay_dir="$(resolve_overlay "$overlay")"
rendered="$(mktemp)"
trap 'rm -f "$rendered" "$rendered".*' EXIT
k kustomize "$overlay_dir" > "$rendered"
controller_ns="$(namespace_with_role controller < "$rendered")"
subscription_ns="$(namespace_with_role subscriptions < "$rendered")"
api_installed=1
k get crd maassubscriptions.maas.opendatahub.io >/dev/null 2>&1 || api_installed=0

remaining_maas() {
  k get "$MAAS_KINDS" -A --ignore-not-found \
    -o jsonpath='{range .items[*]}{.kind}{" "}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}'
}

if [[ $examples -eq 1 && $api_installed -eq 1 ]]; then
  log "removing the examples"
  k kustomize "$MANIFESTS/examples" \
    | sed "s/^  namespace: models-as-a-service\$/  namespace: ${subscription_ns}/" \
    | awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: Namespace\n/' > "$rendered.examples"
  k delete -f "$rendered.examples" --ignore-not-found --wait=false
fi

if [[ $all -eq 1 && $api_installed -eq 1 ]]; then
  log "deleting every MaaS resource"
  if k get crd externalmodels.inference.opendatahub.io >/dev/null 2>&1; then
    k delete "$INFERENCE_KINDS" --all -A --ignore-not-found >/dev/null
  fi
  k delete "$MAAS_KINDS" --all -A --wait=false --ignore-not-found >/dev/null
  available="$(k get deployment maas-controller -n "$controller_ns" --ignore-not-found \
    -o jsonpath='{.status.availableReplicas}')"
  if [[ "${available:-0}" -gt 0 ]]; then
    deadline=$((SECONDS + timeout))
    while [[ -n "$(remaining_maas)" && $SECONDS -lt $deadline ]]; do sleep 2; done
  fi
  left="$(remaining_maas)"
  if [[ -n "$left" ]]; then
    log "no running controller finished them: removing the finalizer and the generated objects by label"
    while read -r kind ns name; do
      [[ -n "$kind" ]] || continue
      k patch "${kind,,}.maas.opendatahub.io" "$name" -n "$ns" --type=json \
        -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1 || true
    done <<< "$left"
    served="$(k api-resources -o name 2>/dev/null)"
    for res in httproutes.gateway.networking.k8s.io authpolicies.kuadrant.io \
               tokenratelimitpolicies.kuadrant.io inferenceobjectives.llm-d.ai services jobs.batch; do
      if grep -qx "$res" <<< "$served"; then
        k delete "$res" -A -l app.kubernetes.io/managed-by=maas-controller --ignore-not-found --wait=false >/dev/null
      fi
    done
  fi
fi

# First the finalizer admission policy: objects created without a controller must not get its finalizer.
k delete -f "$MANIFESTS/finalizers/maas-finalizers.yaml" --ignore-not-found >/dev/null 2>&1 || true
log "removing the controller, maas-api, the billing operator and the psp-connector from namespace $controller_ns"
awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: Namespace\n/' "$rendered" > "$rendered.objects"
k delete -f "$rendered.objects" --ignore-not-found --wait=true --timeout="${timeout}s"

if [[ $all -eq 1 ]]; then
  log "removing the MaaS API (CRDs, admission policy) and namespace $subscription_ns"
  k delete -k "$MANIFESTS" --ignore-not-found --wait=true --timeout="${timeout}s"
  k delete namespace "$subscription_ns" --ignore-not-found --wait=true --timeout="${timeout}s"
fi

cat <<EOF

maasctl is uninstalled from namespace $controller_ns (the namespace itself is kept).
EOF
if [[ $all -eq 0 ]]; then
  cat <<EOF
Kept: the MaaS CRDs, the admission policy, namespace $subscription_ns and all MaaS resources
(hack/uninstall.sh --all removes them too).
EOF
fi
