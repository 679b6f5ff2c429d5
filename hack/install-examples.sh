#!/usr/bin/env bash
# Add the sample resources of manifests/examples: namespace `llm` with an ExternalModel (+ its upstream-key
# Secret) published by a MaaSModelRef, a MaaSAuthPolicy and two MaaSSubscriptions (free, premium).
# Idempotent (server-side apply); hack/uninstall.sh --examples removes them.
#
#   hack/install-examples.sh [--subscription-namespace NS] [--dry-run]
#
# The Secret holds a placeholder key; the script never overwrites a Secret that already exists.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy.sh"  # its helper functions only

subscription_ns=models-as-a-service
dry_run=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --subscription-namespace) subscription_ns="$2"; shift 2 ;;
    --subscription-namespace=*) subscription_ns="${1#*=}"; shift ;;
    --dry-run) dry_run=(--dry-run=server); shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

k get crd maassubscriptions.maas.opendatahub.io >/dev/null 2>&1 || die "maasctl is not installed: run hack/deploy.sh first"
k wait --for=condition=Established --timeout=120s -f "$MANIFESTS/crds/" >/dev/null
k get namespace "$subscription_ns" >/dev/null 2>&1 || die "subscription namespace $subscription_ns does not exist"

rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
k kustomize "$MANIFESTS/examples" | sed "s/^  namespace: models-as-a-service\$/  namespace: ${subscription_ns}/" > "$rendered"

if k get secret openai-upstream-key -n llm >/dev/null 2>&1; then
  # Keep a real key someone put there: apply everything but the Secret.
  awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\nkind: Secret\n/' "$rendered" > "$rendered.nosecret"
  mv "$rendered.nosecret" "$rendered"
fi
log "applying the examples (subscription namespace $subscription_ns)"
apply_stream_when_served "${dry_run[@]}" < "$rendered"

cat <<EOF

Examples installed. Watch the controller pick them up:
  kubectl -n llm get externalmodels,maasmodelrefs,httproutes
  kubectl -n $subscription_ns get maasauthpolicies,maassubscriptions
  kubectl -n llm get authpolicies,tokenratelimitpolicies
Put the real provider key in Secret llm/openai-upstream-key (key api-key) before sending traffic.
EOF
