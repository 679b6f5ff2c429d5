"""Render the install manifests and act as the installed ServiceAccounts (shared by tests/install and the
reconciler fixtures, which run the controller with exactly the RBAC of manifests/base)."""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s

from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane, ensure_binary

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
DEFAULT_CONTROLLER_NS = "opendatahub"
DEFAULT_SUBSCRIPTION_NS = "models-as-a-service"
FIELD_MANAGER = "maasctl-tests"

# Objects the controller's identity needs: its ServiceAccount, both namespaces and its RBAC.
_CONTROLLER_IDENTITY = {"maas-controller", "maas-key-cleanup"}
_IDENTITY_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def kubectl_argv() -> list[str]:
    """The kubectl built into the local control-plane binary."""
    return [str(ensure_binary()), "kubectl"]


def kubectl(*args: str, kubeconfig: Path | None = None, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    proc = subprocess.run([*kubectl_argv(), *args], input=stdin, capture_output=True, text=True, env=env,
                          timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@functools.cache
def render_text(path: Path) -> str:
    """`kubectl kustomize <path>` output (cached: the manifests do not change during a session)."""
    return kubectl("kustomize", str(path)).stdout


def render(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(path)) if d]


def find(docs: Iterable[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return dict(d)
    raise AssertionError(f"{kind} {name} not rendered")


def controller_identity_docs(controller_ns: str, subscription_ns: str) -> list[dict[str, Any]]:
    """The default overlay's controller ServiceAccount, RBAC and namespaces, moved to these namespaces."""
    return identity_docs(_CONTROLLER_IDENTITY, controller_ns, subscription_ns)


def identity_docs(names: set[str], controller_ns: str, subscription_ns: str) -> list[dict[str, Any]]:
    """The default overlay's ServiceAccounts/RBAC called `names`, and the namespaces, moved to these ones."""
    out = []
    for doc in render(MANIFESTS / "overlays" / "default"):
        meta = doc["metadata"]
        role = (meta.get("labels") or {}).get("maas.opendatahub.io/namespace-role")
        if doc["kind"] == "Namespace" and role in ("controller", "subscriptions"):
            d = copy.deepcopy(doc)
            d["metadata"]["name"] = controller_ns if role == "controller" else subscription_ns
            out.append(d)
        elif doc["kind"] in _IDENTITY_KINDS and meta["name"] in names:
            d = copy.deepcopy(doc)
            ns = d["metadata"].get("namespace")
            if ns is not None:
                d["metadata"]["namespace"] = controller_ns if ns == DEFAULT_CONTROLLER_NS else subscription_ns
            for subject in d.get("subjects") or ():
                subject["namespace"] = controller_ns
            out.append(d)
    assert any(d["kind"] == "ClusterRole" for d in out), f"ClusterRole of {names} missing from the overlay"
    return out


async def kubectl_async(*args: str, kubeconfig: Path, stdin: str | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(), *args, env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{err.decode()}")
    return out.decode()


async def apply_docs(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    await kubectl_async("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                        "-f", "-", kubeconfig=cp.kubeconfig, stdin=yaml.safe_dump_all(docs))


async def service_account_api(cp: ControlPlane, namespace: str, name: str,
                              ready_checks: Iterable[tuple[str, ...]] = ()) -> k8s.ApiClient:
    """An ApiClient authenticated with a fresh TokenRequest token of `namespace/name`.

    Each of `ready_checks` is a `kubectl auth can-i` question (e.g. ("list", "maasmodelrefs.maas.opendatahub.io"))
    polled until the API server's RBAC cache says yes, so the first request does not race the new bindings.
    """
    admin = await connect(str(cp.kubeconfig))
    try:
        core = k8s.CoreV1Api(admin)
        req = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=7200))
        token = (await core.create_namespaced_service_account_token(name, namespace, req)).status.token
    finally:
        await admin.close()
    path = cp.root / f"sa-{namespace}-{name}.kubeconfig"
    doc = yaml.safe_load(cp.kubeconfig.read_text())
    doc["users"] = [{"name": name, "user": {"token": token}}]
    doc["contexts"] = [{"name": name, "context": {"cluster": doc["clusters"][0]["name"], "user": name}}]
    doc["current-context"] = name
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    for ready_check in ready_checks:
        for _ in range(100):
            proc = await asyncio.create_subprocess_exec(
                *kubectl_argv(), "auth", "can-i", *ready_check, env={**os.environ, "KUBECONFIG": str(path)},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, _ = await proc.communicate()
            if out.decode().strip() == "yes":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{namespace}/{name} never got {ready_check}")
    return await connect(str(path))


async def controller_api(cp: ControlPlane, controller_ns: str = DEFAULT_CONTROLLER_NS,
                         subscription_ns: str = DEFAULT_SUBSCRIPTION_NS) -> k8s.ApiClient:
    """Apply the controller's RBAC from the default overlay and return a client acting as its ServiceAccount."""
    await apply_docs(cp, controller_identity_docs(controller_ns, subscription_ns))
    return await service_account_api(cp, controller_ns, "maas-controller",
                                     ready_checks=[("create", "leases.coordination.k8s.io", "-n", controller_ns),
                                                   ("list", "maasmodelrefs.maas.opendatahub.io", "-A")])


async def maas_api_api(cp: ControlPlane, controller_ns: str = DEFAULT_CONTROLLER_NS,
                       subscription_ns: str = DEFAULT_SUBSCRIPTION_NS) -> k8s.ApiClient:
    """Apply maas-api's RBAC from the default overlay (its organization-admin Role too) and return a client
    acting as its ServiceAccount."""
    await apply_docs(cp, identity_docs({"maas-api", "maas-api-organizations"}, controller_ns, subscription_ns))
    return await service_account_api(cp, controller_ns, "maas-api",
                                     ready_checks=[("create", "tokenreviews.authentication.k8s.io"),
                                                   ("create", "subjectaccessreviews.authorization.k8s.io"),
                                                   ("watch", "configmaps", "-n", subscription_ns)])
