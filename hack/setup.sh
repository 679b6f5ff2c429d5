#!/usr/bin/env bash
# Prepare a fresh machine: Python virtualenv with pinned dependencies, PostgreSQL and Redis servers (tests),
# the console's browser-test tools (hack/setup-console.sh), the guardrails engine (hack/setup-guardrails.sh:
# NeMo Guardrails in its own cached virtualenv) and the Go-built local control plane (cached under
# ~/.cache/maasctl, keyed by go.sum + Go version) and stripe-mock (hack/stripe-mock, cached the same way).
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

want_postgres=${1:-}
PYTHON=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.maasctl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'
  touch "$stamp"
fi

if [ "$want_postgres" = "--postgres" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing PostgreSQL (Debian package) ..." >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "PostgreSQL server binaries missing: install the 'postgresql' package" >&2
    exit 1
  fi
fi

# Redis: the token counters several gateway replicas share (tests start a throwaway server).
if [ "$want_postgres" = "--postgres" ] && ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Redis (Debian package) ..." >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      redis-server >/dev/null
    # the package starts a system-wide server; tests run their own
    (command -v systemctl >/dev/null && systemctl disable --now redis-server >/dev/null 2>&1) || \
      (service redis-server stop >/dev/null 2>&1 || true)
  else
    echo "Redis missing: install the 'redis-server' package" >&2
    exit 1
  fi
fi

./hack/setup-console.sh
./hack/setup-guardrails.sh
.venv/bin/maasctl testenv build >/dev/null
# stripe-mock (Stripe's API mock, hack/stripe-mock): the psp-connector's tests run the official SDK against it
.venv/bin/python -m maasctl.testenv.stripemock >/dev/null
