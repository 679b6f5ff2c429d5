#!/usr/bin/env bash
# What the console's browser tests need, installed the project's own way (called by hack/setup.sh):
# - Debian's chromium + chromium-driver (headless Chromium driven by Selenium through chromedriver);
# - Node.js + npm from Debian, and the pinned OpenID provider (hack/oidc-provider/package-lock.json) installed
#   with `npm ci` into ~/.cache/maasctl/oidc-provider/<hash of the lock file>/ (outside the repository).
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $* (Debian packages) ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
  else
    echo "missing: $* — install these Debian packages (the console's browser tests need them)" >&2
    exit 1
  fi
}

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

if [ -f hack/oidc-provider/package-lock.json ]; then
  lock_hash=$(cat hack/oidc-provider/package.json hack/oidc-provider/package-lock.json | sha256sum | cut -c1-16)
  dest="${MAASCTL_CACHE:-$HOME/.cache/maasctl}/oidc-provider/$lock_hash"
  if [ ! -f "$dest/.installed" ]; then
    mkdir -p "$dest"
    cp hack/oidc-provider/package.json hack/oidc-provider/package-lock.json "$dest/"
    (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$dest/.installed"
  fi
fi
