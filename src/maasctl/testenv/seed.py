"""Control planes that start with the third-party CRDs already served.

Installing the third-party CRDs (Gateway API, Kuadrant, KServe, ...: 2 MB of schemas) costs a fresh API server
about 11 s of CPU and half a minute on a busy two-core machine, and the suite starts dozens of control planes.
Instead, the CRDs are installed once into a throwaway control plane whose etcd data directory is then kept in
the cache (`~/.cache/maasctl/etcd-seeds/<binary and CRD set>`); each control plane starts etcd from a copy of
it, and its API server loads the CRDs, already Established, as it starts. The API server itself is the real one:
it reads the CRDs from etcd exactly as after a restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from maasctl.testenv.binary import cache_home, ensure_binary
from maasctl.testenv.controlplane import ControlPlane
from maasctl.testenv.crds import apply_documents, third_party_crd_files, third_party_crds, wait_established

__all__ = ["third_party_seed"]


def third_party_seed(*, groups: Iterable[str] | None = None, exclude_groups: Iterable[str] = ()) -> Path:
    """An etcd data directory holding the third-party CRDs (all, only `groups`, or all but `exclude_groups`),
    Established; built on first use, then shared (read-only: `ControlPlane(etcd_seed=...)` copies it)."""
    only = sorted(groups) if groups is not None else None
    skip = sorted(exclude_groups)
    binary = ensure_binary(quiet=True)
    digest = hashlib.sha256(json.dumps([str(binary.resolve()), only, skip]).encode())
    for path in third_party_crd_files():  # their bytes, not their parse: 4 MB of YAML is seconds of CPU
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    root = cache_home() / "etcd-seeds"
    target = root / digest.hexdigest()[:16]
    if (target / "member").is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{target.name}.lock", "w") as lock:  # two test workers may want it at once: one builds it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "member").is_dir():
            _build(third_party_crds(groups=only, exclude_groups=skip), binary, target)
    return target


def _build(docs: list[dict[str, object]], binary: Path, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f"{target.name}-build-") as tmp:
        cp = ControlPlane(directory=Path(tmp) / "cp", binary=binary, with_controller_manager=False)
        with cp, cp.http_client() as http:
            wait_established(http, apply_documents(http, docs, field_manager="maasctl-testenv"))
        # stopped: etcd (the last to stop) has written everything; the rename makes the seed appear whole
        shutil.rmtree(target, ignore_errors=True)
        (Path(tmp) / "cp" / "etcd").rename(target)
