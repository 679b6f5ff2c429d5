"""Find and install the third-party CRDs the controller reads or writes.

Source order: `MAASCTL_THIRD_PARTY_CRDS` (a folder), a `shared/crds` folder beside the checkout or beside any
folder above it (git worktrees live deeper), then the same files from the upstream projects' Go modules
(`go mod download -json MODULE@VERSION`). Only CustomResourceDefinition documents are installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from maasctl.testenv.binary import BuildError, repo_root

# (module@version, glob inside the module) for the Go-module fallback.
GO_MODULE_SOURCES: tuple[tuple[str, str], ...] = (
    ("sigs.k8s.io/gateway-api@v1.6.1", "config/crd/standard/gateway.networking.k8s.io_*.yaml"),
    ("github.com/kuadrant/kuadrant-operator@v1.5.2", "config/crd/bases/kuadrant.io_*policies.yaml"),
    ("github.com/kserve/kserve@v0.20.0", "config/crd/minimal/llmisvc/*.yaml"),
    ("sigs.k8s.io/gateway-api-inference-extension@v1.6.0", "config/crd/bases/inference.networking.k8s.io_*.yaml"),
    ("sigs.k8s.io/kueue@v0.19.2", "config/components/crd/bases/*.yaml"),
)
# Istio's and Envoy Gateway's CRDs (EnvoyFilter, EnvoyExtensionPolicy) come from the shared folder only: upstream
# ships them in multi-CRD / Helm-templated files.


def shared_crds_dir() -> Path | None:
    """The folder of third-party CRDs (`MAASCTL_THIRD_PARTY_CRDS`, else `shared/crds` beside the checkout or
    an ancestor of it), or None."""
    override = os.environ.get("MAASCTL_THIRD_PARTY_CRDS")
    candidates = [Path(override)] if override else []
    with contextlib.suppress(BuildError):
        candidates.extend(folder / "shared" / "crds" for folder in repo_root().parents)
    return next((folder for folder in candidates if any(folder.glob("*/*.yaml"))), None)


def third_party_crd_files() -> list[Path]:
    """All third-party CRD YAML files, sorted for a stable install order."""
    folder = shared_crds_dir()
    if folder is not None:
        return sorted(folder.glob("*/*.yaml"))
    return sorted(_from_go_modules())


def _from_go_modules() -> Iterator[Path]:
    go = shutil.which("go")
    if go is None:
        raise BuildError("no third-party CRD folder and no Go to fetch the CRDs from the module proxy")
    for module, pattern in GO_MODULE_SOURCES:
        out = subprocess.run([go, "mod", "download", "-json", module], capture_output=True, text=True)
        if out.returncode != 0:
            raise BuildError(f"go mod download {module} failed: {out.stdout[-800:]}{out.stderr[-800:]}")
        yield from Path(json.loads(out.stdout)["Dir"]).glob(pattern)


# libyaml's parser when PyYAML has it: the third-party CRDs are 4 MB of YAML, 8 s of CPU for the pure-Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.load_all(path.read_text(), Loader=_LOADER)
                    if isinstance(d, dict) and d.get("kind"))
    return docs


_CLUSTER_SCOPED_PATHS = {
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "Namespace": "/api/v1/namespaces",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


# A fresh API server on a busy machine can take well over the client's 10 s to store a large CRD (KServe's are
# hundreds of KiB); `maasctl dev` must not die of it at start.
_APPLY_TIMEOUT = 120.0


def apply_documents(http: httpx.Client, docs: Iterable[dict[str, Any]], *, field_manager: str) -> list[str]:
    """Server-side apply cluster-scoped install objects; return the names of the CRDs applied."""
    crds: list[str] = []
    for doc in docs:
        base = _CLUSTER_SCOPED_PATHS.get(doc["kind"])
        if base is None:
            raise ValueError(f"apply_documents does not install kind {doc['kind']}")
        name = doc["metadata"]["name"]
        resp = http.patch(
            f"{base}/{name}",
            params={"fieldManager": field_manager, "force": "true"},
            content=json.dumps(doc),
            headers={"Content-Type": "application/apply-patch+yaml"},
            timeout=_APPLY_TIMEOUT,
        )
        if resp.status_code >= 300:
            raise RuntimeError(f"applying {doc['kind']} {name} failed: {resp.status_code} {resp.text[:500]}")
        if doc["kind"] == "CustomResourceDefinition":
            crds.append(name)
    return crds


def wait_established(http: httpx.Client, names: Iterable[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            obj = http.get(f"{_CLUSTER_SCOPED_PATHS['CustomResourceDefinition']}/{name}").json()
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            time.sleep(0.1)


PROXY_API_GROUPS: tuple[str, ...] = ("networking.istio.io", "gateway.envoyproxy.io")
"""The gateway implementations' APIs (Istio EnvoyFilter, Envoy Gateway EnvoyExtensionPolicy): a cluster may serve
either, both or neither, so tests install them selectively."""


def third_party_crds(*, groups: Iterable[str] | None = None,
                     exclude_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The third-party CRD documents, optionally only those of `groups` or without those of `exclude_groups`."""
    only = set(groups) if groups is not None else None
    skip = set(exclude_groups)
    crds = [d for d in load_documents(third_party_crd_files())
            if d["kind"] == "CustomResourceDefinition" and "group" in (d.get("spec") or {})]  # not kustomize patches
    return [d for d in crds if (only is None or d["spec"]["group"] in only) and d["spec"]["group"] not in skip]


def install_third_party_crds(http: httpx.Client, *, groups: Iterable[str] | None = None,
                             exclude_groups: Iterable[str] = ()) -> list[str]:
    """Install the third-party CRDs (all by default) and wait until the server serves them."""
    crds = third_party_crds(groups=groups, exclude_groups=exclude_groups)
    names = apply_documents(http, crds, field_manager="maasctl-testenv")
    wait_established(http, names)
    return names
