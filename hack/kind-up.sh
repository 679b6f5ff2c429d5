#!/usr/bin/env bash
# A kind cluster with the real gateway stack, ready for hack/deploy.sh and E2E_CLUSTER=external (docs/e2e.md:
# the whole recipe). Needs Docker, kind, helm, kubectl and network access; not run in this project's CI.
#
# Creates the cluster and installs: Gateway API, Istio (the Gateway API implementation, from its Helm charts),
# the Kuadrant operator with a Kuadrant instance (Authorino + Limitador), KServe's LLMInferenceService CRD
# (and llm-d's InferenceObjective CRD when given), the MaaS Gateway (istio class) and the maasctl image,
# built from the Containerfile and loaded into the nodes.
#
# The upstream install sources are passed in, so this script pins no download location:
#   GATEWAY_API_MANIFEST     Gateway API standard-install manifest (file or URL), the release in ../shared/crds
#   ISTIO_CHART_REPO         Helm repository of Istio's charts (base, istiod)
#   KUADRANT_CHART           Helm chart reference of the Kuadrant operator (e.g. <repo>/kuadrant-operator)
#   KSERVE_LLMISVC_CRD       KServe's minimal LLMInferenceService CRD (file or URL)
#   INFERENCE_OBJECTIVE_CRD  optional: llm-d's InferenceObjective CRD (request priorities)
# Local files work too: the CRDs of ../shared/crds can stand in for the manifests.
# Optional: CLUSTER (default maasctl), GATEWAY (default maas-dev/maas-dev-gateway: the dev overlay's),
# IMAGE (default quay.io/opendatahub/maasctl:dev, the dev overlay's), SKIP_IMAGE=1 (keep the loaded image).
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-maasctl}
GATEWAY=${GATEWAY:-maas-dev/maas-dev-gateway}
IMAGE=${IMAGE:-quay.io/opendatahub/maasctl:dev}
: "${GATEWAY_API_MANIFEST:?set GATEWAY_API_MANIFEST}" "${ISTIO_CHART_REPO:?set ISTIO_CHART_REPO}"
: "${KUADRANT_CHART:?set KUADRANT_CHART}" "${KSERVE_LLMISVC_CRD:?set KSERVE_LLMISVC_CRD}"
gateway_ns=${GATEWAY%%/*}
gateway_name=${GATEWAY#*/}

for tool in kind helm kubectl docker; do
  command -v "$tool" >/dev/null || { echo "$tool is required"; exit 1; }
done
step() { printf '==> %s\n' "$*"; }

step "kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER"
kubectl config use-context "kind-$CLUSTER" >/dev/null

step "Gateway API"
kubectl apply --server-side -f "$GATEWAY_API_MANIFEST"

step "Istio (Gateway API implementation)"
helm upgrade --install istio-base base --repo "$ISTIO_CHART_REPO" -n istio-system --create-namespace --wait
helm upgrade --install istiod istiod --repo "$ISTIO_CHART_REPO" -n istio-system --wait

step "Kuadrant operator and a Kuadrant instance (Authorino, Limitador)"
helm upgrade --install kuadrant-operator "$KUADRANT_CHART" --namespace kuadrant-system --create-namespace --wait
kubectl apply -f - <<YAML
apiVersion: kuadrant.io/v1beta1
kind: Kuadrant
metadata: {name: kuadrant, namespace: kuadrant-system}
spec: {}
YAML
kubectl wait --for=condition=Ready --timeout=300s -n kuadrant-system kuadrant/kuadrant

step "KServe LLMInferenceService CRD${INFERENCE_OBJECTIVE_CRD:+ and llm-d InferenceObjective CRD}"
kubectl apply --server-side -f "$KSERVE_LLMISVC_CRD"
[[ -z "${INFERENCE_OBJECTIVE_CRD:-}" ]] || kubectl apply --server-side -f "$INFERENCE_OBJECTIVE_CRD"

step "Gateway $gateway_ns/$gateway_name (class istio; Istio runs its proxy as Service $gateway_name-istio)"
kubectl create namespace "$gateway_ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: $gateway_name, namespace: $gateway_ns}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
YAML
kubectl wait --for=condition=Programmed --timeout=300s -n "$gateway_ns" "gateway/$gateway_name"

if [[ "${SKIP_IMAGE:-0}" != 1 ]]; then
  step "image $IMAGE"
  docker build -t "$IMAGE" -f Containerfile .
  kind load docker-image "$IMAGE" --name "$CLUSTER"
fi

cat <<EOF

kind cluster $CLUSTER is ready. Next (docs/e2e.md):
  hack/deploy.sh --overlay dev
  hack/e2e-cluster.sh users && hack/e2e-cluster.sh admin maas-dev-subscriptions && hack/e2e-cluster.sh models $IMAGE
EOF
