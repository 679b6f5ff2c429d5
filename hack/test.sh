#!/usr/bin/env bash
# The whole test suite: lint, strict typing, layer contracts (import-linter, see pyproject.toml), unit +
# integration tests (real control plane, real PostgreSQL) and the end-to-end journeys (e2e/) twice: against the
# suite's own local stack with every pipeline stage in the gateway process, then in E2E_CLUSTER=external mode
# against a `maasctl dev` started as if it were someone else's cluster (hack/e2e-dev.sh) whose gateway plays
# Envoy + Authorino + Limitador and hands the payload stages to a `maasctl payload-processor` process over gRPC
# (E2E_PAYLOAD_PROCESSOR=1). The journeys that drive the suite's own processes (`local_stack`: billing operators,
# the guardrails engine, tenant gateways) cannot run against someone else's cluster, so a third run takes them
# through the processor on the local stack: every journey runs through both fronts. A skipped journey fails any
# run (E2E_NO_SKIPS=1).
# Same command locally and in CI; arguments go to the first pytest run. All three runs always run; any failing
# fails the command. (Run side by side, the second and third took 80 s less, but a budget journey's timing failed
# under the added load.)
set -euo pipefail
cd "$(dirname "$0")/.."
./hack/setup.sh --postgres
.venv/bin/ruff check .
# mypy's incremental cache lives outside the checkout (like the built control plane): a fresh clone checks 375
# files in about 4 s instead of 68. mypy validates each cached module against its source's hash, so a stale cache
# costs time, never a missed error.
.venv/bin/mypy --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/maasctl/mypy" src
PYTHONPATH=src .venv/bin/lint-imports --no-cache >/dev/null || PYTHONPATH=src .venv/bin/lint-imports --no-cache
export E2E_NO_SKIPS=1
status=0
# --durations=20: the 20 slowest tests at the end of the run (issue 39: the suite stays fast as it grows).
# -n: the test files run on two workers (pytest-xdist), each with its own control plane and stacks: most tests
# wait on a process, so the two cores were half idle (a fresh-clone run of 3,680 tests: 29 min instead of about 55).
# --dist loadfile keeps a file's tests (and its module-scoped servers) on one worker. MAASCTL_TEST_WORKERS=0 runs
# them in this process, one after another.
# --no-loadscope-reorder: the files are handed out longest first (tests/schedule.py, tests/durations.json, refreshed
# from the JUnit report this run writes to .local/test-results.xml by hack/test-durations.py), so the run does not
# end with one worker busy on a long file while the other idles.
workers="${MAASCTL_TEST_WORKERS:-2}"
mkdir -p .local
env -u E2E_CLUSTER -u E2E_PAYLOAD_PROCESSOR .venv/bin/pytest -n "$workers" --dist loadfile --no-loadscope-reorder \
  --junitxml=.local/test-results.xml --durations=20 tests e2e "$@" || status=$?
echo "==> e2e journeys again, E2E_CLUSTER=external against a separately started maasctl dev, through the payload processor"
E2E_PAYLOAD_PROCESSOR=1 ./hack/e2e-dev.sh -q || status=$?
echo "==> the local_stack journeys again, through the payload processor on the local stack"
env -u E2E_CLUSTER E2E_PAYLOAD_PROCESSOR=1 .venv/bin/pytest -q -p no:cacheprovider -n "$workers" --dist loadfile \
  -m local_stack e2e || status=$?
exit "$status"
