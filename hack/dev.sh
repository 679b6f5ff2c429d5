#!/usr/bin/env bash
# The main job: set up, then run the controller (and maas-api) on an embedded local control plane with
# sample resources, in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
./hack/setup.sh
exec .venv/bin/maasctl dev --log-format console --metrics-bind-address 127.0.0.1:8080 \
  --health-probe-bind-address 127.0.0.1:8081 "$@"
