#!/usr/bin/env bash
# The whole test suite: lint, strict typing, layer contracts (import-linter, see pyproject.toml), unit +
# integration tests (real control plane, real PostgreSQL) and the end-to-end journeys (e2e/).
# Same command locally and in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
./hack/setup.sh --postgres
.venv/bin/ruff check .
.venv/bin/mypy src
PYTHONPATH=src .venv/bin/lint-imports --no-cache >/dev/null || PYTHONPATH=src .venv/bin/lint-imports --no-cache
exec .venv/bin/pytest tests e2e "$@"
