#!/usr/bin/env bash
# The guardrails engine (NVIDIA NeMo Guardrails 0.24.1 with its server extra), installed the project's own way
# (called by hack/setup.sh): its own virtualenv, because its dependency pins are not maasctl's, in
# ~/.cache/maasctl/guardrails/<hash of hack/guardrails/engine-constraints.txt>/ (outside the repository),
# pinned by that constraints file. About 340 MB; ~30 s from PyPI on a fresh machine, nothing when cached.
# Prints nothing when everything is already there. `hack/setup-guardrails.sh --print-dir` prints the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
lock=hack/guardrails/engine-constraints.txt
hash=$(sha256sum "$lock" | cut -c1-16)
dest="${MAASCTL_CACHE:-$HOME/.cache/maasctl}/guardrails/$hash"
if [ "${1:-}" = "--print-dir" ]; then
  echo "$dest"
  exit 0
fi
if [ ! -f "$dest/.installed" ]; then
  echo "installing the guardrails engine (nemoguardrails) into $dest ..." >&2
  rm -rf "$dest"
  "$PYTHON" -m venv "$dest"
  "$dest/bin/python" -m pip install --quiet --disable-pip-version-check -c "$lock" "nemoguardrails[server]"
  touch "$dest/.installed"
fi
