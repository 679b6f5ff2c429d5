#!/usr/bin/env bash
# Create a kind cluster with the real gateway stack for E2E_CLUSTER=kind (needs Docker and network access;
# not run in CI here). The upstream install sources are passed in, so this script pins no download location:
#   GATEWAY_API_MANIFEST   Gateway API standard-install manifest (file or URL) of the release in ../shared/crds
#   KUADRANT_CHART         Helm chart reference of the Kuadrant operator (e.g. <repo>/kuadrant-operator)
#   KSERVE_LLMISVC_CRD     KServe's minimal LLMInferenceService CRD (file or URL)
# Local files work too: the CRDs of ../shared/crds can stand in for the two manifests.
set -euo pipefail
CLUSTER=${CLUSTER:-maasctl}
: "${GATEWAY_API_MANIFEST:?set GATEWAY_API_MANIFEST}" "${KUADRANT_CHART:?set KUADRANT_CHART}"
: "${KSERVE_LLMISVC_CRD:?set KSERVE_LLMISVC_CRD}"

for tool in kind helm kubectl docker; do
  command -v "$tool" >/dev/null || { echo "$tool is required"; exit 1; }
done
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER"
kubectl apply --server-side -f "$GATEWAY_API_MANIFEST"
helm upgrade --install kuadrant-operator "$KUADRANT_CHART" --namespace kuadrant-system --create-namespace --wait
kubectl apply -f - <<YAML
apiVersion: kuadrant.io/v1beta1
kind: Kuadrant
metadata: {name: kuadrant, namespace: kuadrant-system}
spec: {}
YAML
kubectl apply --server-side -f "$KSERVE_LLMISVC_CRD"
echo "kind cluster $CLUSTER ready: now hack/deploy.sh --overlay dev (see docs/e2e.md)"
