#!/usr/bin/env bash
# The e2e journeys in E2E_CLUSTER=external mode against a `maasctl dev` started here as if it were someone
# else's cluster: another process, a temporary directory, free ports. The suite gets only what a user of any
# cluster has: the kubeconfig, the gateway and maas-api URLs, a token hook (ServiceAccounts made by
# hack/e2e-cluster.sh, as on kind) and optional extras a real cluster can provide too (the test models' URLs and
# request log, the gateway / key-cleanup token files). hack/test.sh runs it; arguments go to pytest.
# E2E_PAYLOAD_PROCESSOR=1: the gateway hands the payload stages to a `maasctl payload-processor` process over
# gRPC (ext_proc), so every journey goes through the processor.
# Every journey must run (E2E_NO_SKIPS=1 unless set otherwise), except those marked `local_stack` (they drive the
# suite's own processes). maasctl dev is stopped on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$(mktemp -d "${TMPDIR:-/tmp}/maasctl-e2e-dev.XXXXXX")"
dev_pid=""
stop_dev() {
  if [[ -n "$dev_pid" ]] && kill -0 "$dev_pid" 2>/dev/null; then
    kill -TERM "$dev_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$dev_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$dev_pid" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap stop_dev EXIT
trap 'exit 130' INT TERM

# Five distinct free loopback ports outside the ephemeral range (see maasctl.testenv.controlplane.free_port).
read -r gateway_port api_port console_port model_port incluster_port < <(.venv/bin/python -c '
from maasctl.testenv.controlplane import free_port
ports = []
while len(ports) < 5:
    port = free_port()
    if port not in ports:
        ports.append(port)
print(*ports)
')

: > "$dir/dev.out"
echo "==> starting maasctl dev in $dir (gateway :$gateway_port, maas-api :$api_port)"
.venv/bin/maasctl dev --dir "$dir/dev" --gateway-port "$gateway_port" --api-port "$api_port" \
  --console-port "$console_port" --model-port "$model_port" --incluster-model-port "$incluster_port" \
  --metrics-bind-address 0 --health-probe-bind-address 0 --log-format console \
  ${E2E_PAYLOAD_PROCESSOR:+--payload-processor} > "$dir/dev.out" 2>&1 &
dev_pid=$!
deadline=$((SECONDS + ${E2E_DEV_START_TIMEOUT:-300}))
until grep -q "maasctl dev is running" "$dir/dev.out"; do
  if ! kill -0 "$dev_pid" 2>/dev/null || (( SECONDS > deadline )); then
    echo "maasctl dev did not start (last lines of its output):" >&2
    tail -n 40 "$dir/dev.out" >&2
    exit 1
  fi
  sleep 1
done
echo "==> maasctl dev is up after ${SECONDS}s"

export KUBECONFIG="$dir/dev/kubeconfig"
KUBECTL="$(.venv/bin/maasctl testenv build) kubectl"
export KUBECTL
./hack/e2e-cluster.sh users
./hack/e2e-cluster.sh admin models-as-a-service
# E2E_TOKEN_COMMAND, E2E_GROUPS and E2E_ADMIN_TOKEN_FILE (a token file under $dir, removed on exit)
eval "$(TMPDIR="$dir" ./hack/e2e-cluster.sh env)"

local_url() { echo "http://127.0.0.1:$1"; }
E2E_CLUSTER=external \
E2E_NO_SKIPS="${E2E_NO_SKIPS:-1}" \
E2E_KUBECONFIG="$KUBECONFIG" \
E2E_GATEWAY_URL="$(local_url "$gateway_port")" \
E2E_MAAS_API_URL="$(local_url "$api_port")" \
E2E_GATEWAY=openshift-ingress/maas-default-gateway \
E2E_SUBSCRIPTION_NAMESPACE=models-as-a-service \
E2E_CONTROLLER_NAMESPACE=opendatahub \
E2E_MODEL_URL="$(local_url "$model_port")" \
E2E_INCLUSTER_MODEL_URL="$(local_url "$incluster_port")" \
E2E_MODEL_REQUEST_LOG_URL="$(local_url "$model_port")/debug/requests" \
E2E_UPSTREAM_KEY=dev-upstream-key \
E2E_GATEWAY_TOKEN_FILE="$dir/dev/gateway.token" \
E2E_KEY_CLEANUP_TOKEN_FILE="$dir/dev/maas-key-cleanup.token" \
  .venv/bin/pytest e2e -p no:cacheprovider -m "not local_stack" "$@" || {
  status=$?
  # What the cluster's side said (logs carry no secrets), before the trap removes them.
  for log in gateway payload-processor maas-api controller; do
    [[ -f "$dir/dev/$log.log" ]] || continue
    echo "==> last warnings and errors of $log" >&2
    grep -iE '"level": ?"(warning|error)"|unavailable|Traceback' "$dir/dev/$log.log" | tail -n 25 >&2 || true
  done
  exit "$status"
}
