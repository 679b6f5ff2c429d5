"""Build and cache the one-binary control plane (`hack/k8s-testenv`).

The binary is cached outside the repository, keyed by the module's go.sum and the Go version, so it is
built once per machine and rebuilt only when the pinned versions change.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

KUBE_VERSION = "v1.36.3"
BINARY_NAME = "k8s-testenv"


class BuildError(RuntimeError):
    """The control-plane binary could not be built (Go missing, module proxy unreachable, ...)."""


def repo_root() -> Path:
    """The checkout this package was installed from (editable install), found by walking up."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "k8s-testenv" / "go.mod").is_file():
            return parent
    raise BuildError("hack/k8s-testenv not found: the control plane is built from a maasctl checkout")


def source_dir() -> Path:
    return repo_root() / "hack" / "k8s-testenv"


def cache_home() -> Path:
    base = os.environ.get("MAASCTL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "maasctl"
    )
    return Path(base)


def _go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def cache_key(src: Path, go_version: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.sum", "go.mod", "main.go", "etcd.go"):
        digest.update((src / name).read_bytes())
    digest.update(go_version.encode())
    return digest.hexdigest()[:16]


def ensure_binary(*, quiet: bool = False) -> Path:
    """Return the path of the cached binary, building it first when it is missing.

    `MAASCTL_TESTENV_BIN` points at a prebuilt binary and skips the build entirely.
    Concurrent callers (parallel test sessions) serialise on a lock file, so one build happens.
    """
    override = os.environ.get("MAASCTL_TESTENV_BIN")
    if override:
        path = Path(override)
        if not path.is_file():
            raise BuildError(f"MAASCTL_TESTENV_BIN={override} does not exist")
        return path
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is required to build the local control plane (https://go.dev/dl)")
    src = source_dir()
    key = cache_key(src, _go_version(go))
    target_dir = cache_home() / "k8s-testenv" / key
    target = target_dir / BINARY_NAME
    if target.is_file():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        _build(go, src, target, quiet=quiet)
    return target


def _build(go: str, src: Path, target: Path, *, quiet: bool) -> None:
    minor = KUBE_VERSION.split(".")[1]
    ldflags = (
        "-s -w"
        f" -X k8s.io/component-base/version.gitVersion={KUBE_VERSION}"
        " -X k8s.io/component-base/version.gitMajor=1"
        f" -X k8s.io/component-base/version.gitMinor={minor}"
    )
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    tmp = target.with_suffix(".tmp")
    if not quiet:
        print(f"building the local control plane ({KUBE_VERSION}) into {target} ...", file=sys.stderr)
    started = time.monotonic()
    proc = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BuildError(f"go build failed:\n{proc.stderr[-4000:]}")
    tmp.rename(target)
    if not quiet:
        print(f"built in {time.monotonic() - started:.0f}s", file=sys.stderr)


def main() -> None:
    """`python -m maasctl.testenv.binary`: build if needed and print the binary path."""
    print(ensure_binary())


if __name__ == "__main__":
    main()
