"""hack/deploy.sh, hack/install-examples.sh and hack/uninstall.sh against the local control plane.

Each script runs twice (idempotent). The session control plane is shared with other suites, so the fixture
puts back what those expect afterwards: the MaaS API bound to `models-as-a-service`, and that namespace.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from tests.install.manifests import DEFAULT_SUBSCRIPTION_NS, REPO, kubectl, kubectl_argv

MAAS = "maas.opendatahub.io"


def script(cp: ControlPlane, name: str, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "KUBECTL": " ".join(kubectl_argv())}
    proc = subprocess.run(["bash", str(REPO / "hack" / name), *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"{name} {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def live(cp: ControlPlane, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    args = ["get", kind, name, "-o", "yaml", "--ignore-not-found"]
    if namespace:
        args += ["-n", namespace]
    out = kubectl(*args, kubeconfig=cp.kubeconfig).stdout
    return yaml.safe_load(out) if out.strip() else None


def version(cp: ControlPlane, kind: str, name: str, namespace: str | None = None) -> str:
    obj = live(cp, kind, name, namespace)
    assert obj is not None, (kind, name)
    return str(obj["metadata"]["resourceVersion"])


def admission_allows(cp: ControlPlane, namespace: str) -> bool:
    """Server-side dry run of a MaaSAuthPolicy in `namespace`: does the admission policy let it in?"""
    doc = {"apiVersion": f"{MAAS}/v1alpha1", "kind": "MaaSAuthPolicy",
           "metadata": {"name": "probe", "namespace": namespace},
           "spec": {"modelRefs": [{"name": "m", "namespace": "llm"}], "subjects": {"groups": [{"name": "g"}]}}}
    out = kubectl("create", "--dry-run=server", "-f", "-", kubeconfig=cp.kubeconfig, check=False,
                  stdin=yaml.safe_dump(doc))
    if out.returncode == 0:
        return True
    assert "only accepted in the subscription namespace" in out.stderr, out.stderr
    return False


@pytest.fixture
async def cluster(control_plane: ControlPlane) -> AsyncIterator[ControlPlane]:
    yield control_plane
    api = await connect(str(control_plane.kubeconfig))
    try:
        await install_crds(api, subscription_namespace=DEFAULT_SUBSCRIPTION_NS)
        try:
            await k8s.CoreV1Api(api).create_namespace(
                k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=DEFAULT_SUBSCRIPTION_NS)))
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
    finally:
        await api.close()


def test_deploy_examples_uninstall_are_idempotent(cluster: ControlPlane) -> None:
    cp = cluster
    out = script(cp, "deploy.sh", "--no-wait-pods")
    assert "Next steps" in out and "maas-api-db" in out  # tells how to create the database Secret
    assert "needs the billing ledger" in out and "billing-ledger" in out  # and the psp-connector's Secret
    crd = live(cp, "crd", f"maassubscriptions.{MAAS}")
    assert crd is not None
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    for plural in ("externalmodels", "externalproviders"):  # the reference's newer model API, installed with ours
        assert live(cp, "crd", f"{plural}.inference.opendatahub.io") is not None, plural
    deployments = {d: version(cp, "deployment", d, "opendatahub")
                   for d in ("maas-controller", "maas-api", "billing-controller", "psp-connector",
                             "maas-payload-processor", "maas-console")}
    # The payload processor's install passed the API server's validation (Istio and Envoy Gateway CRDs are
    # installed by the test control plane; the ReferenceGrant is Gateway API's).
    for kind in ("service", "poddisruptionbudget", "horizontalpodautoscaler", "networkpolicy", "referencegrant",
                 "serviceaccount"):
        assert live(cp, kind, "maas-payload-processor", "opendatahub") is not None, kind
    assert live(cp, "clusterrole", "maas-payload-processor") is not None
    assert "maas-payload-processor-redis" in out  # tells how to name the existing Redis
    # The console passed validation too: its route on the Gateway, its AuthPolicy, its session key made once.
    for kind in ("service", "poddisruptionbudget", "networkpolicy", "httproute", "authpolicy", "serviceaccount"):
        assert live(cp, kind, "maas-console", "opendatahub") is not None, kind
    assert live(cp, "clusterrole", "maas-console-admin") is not None
    assert "maas-console-redis" in out and "https://maas-console.example.com" in out
    session_key = live(cp, "secret", "maas-console-session", "opendatahub")
    assert session_key is not None and len(session_key["data"]["secret"]) >= 40
    role = version(cp, "clusterrole", "maas-controller")
    assert admission_allows(cp, DEFAULT_SUBSCRIPTION_NS) and not admission_allows(cp, "default")

    script(cp, "deploy.sh", "--no-wait-pods")
    assert {d: version(cp, "deployment", d, "opendatahub") for d in deployments} == deployments
    assert live(cp, "secret", "maas-console-session", "opendatahub") == session_key  # kept: nobody signed out
    assert version(cp, "clusterrole", "maas-controller") == role
    dry = script(cp, "deploy.sh", "--dry-run")
    assert "nothing was changed" in dry

    out = script(cp, "deploy.sh", "--no-wait-pods", "--database-url", "postgresql+asyncpg://u:p@db:5432/maas",
                 "--ledger-url", "postgresql+asyncpg://u:p@db:5432/billing", "--redis-url", "redis://:rp@redis:6379/0")
    redis = live(cp, "secret", "maas-payload-processor-redis", "opendatahub")
    assert redis is not None and redis["data"]["redis-url"] == "cmVkaXM6Ly86cnBAcmVkaXM6NjM3OS8w"
    console_redis = live(cp, "secret", "maas-console-redis", "opendatahub")
    assert console_redis is not None and console_redis["data"]["redis-url"] == redis["data"]["redis-url"]
    assert "needs an existing Redis" not in out and "rp@redis" not in out and "share sessions in Redis" not in out
    assert live(cp, "secret", "maas-api-db", "opendatahub") is not None
    ledger = live(cp, "secret", "billing-ledger", "opendatahub")
    assert ledger is not None and "ledger-url" in ledger["data"]
    assert "needs the billing ledger" not in out and "u:p@db" not in out  # no hint now; the URLs are not echoed

    script(cp, "install-examples.sh")
    subs = {n: version(cp, "maassubscriptions", n, DEFAULT_SUBSCRIPTION_NS) for n in ("free", "premium")}
    assert live(cp, "maasauthpolicy", "gpt-4o-mini-access", DEFAULT_SUBSCRIPTION_NS) is not None
    assert live(cp, "maasmodelref", "gpt-4o-mini", "llm") is not None
    # A real upstream key put into the sample Secret survives re-running the script.
    kubectl("patch", "secret", "openai-upstream-key", "-n", "llm", "--type=merge",
            "-p", '{"stringData":{"api-key":"sk-real"}}', kubeconfig=cp.kubeconfig)
    script(cp, "install-examples.sh")
    assert {n: version(cp, "maassubscriptions", n, DEFAULT_SUBSCRIPTION_NS) for n in subs} == subs
    secret = live(cp, "secret", "openai-upstream-key", "llm")
    assert secret is not None and secret["data"]["api-key"] == "c2stcmVhbA=="  # base64("sk-real")

    out = script(cp, "uninstall.sh")
    assert live(cp, "deployment", "maas-controller", "opendatahub") is None
    assert live(cp, "clusterrole", "maas-controller") is None
    assert live(cp, "clusterrolebinding", "maas-api") is None
    assert live(cp, "deployment", "psp-connector", "opendatahub") is None
    assert live(cp, "clusterrole", "psp-connector") is None
    assert live(cp, "deployment", "maas-payload-processor", "opendatahub") is None
    assert live(cp, "clusterrole", "maas-payload-processor") is None
    assert live(cp, "deployment", "maas-console", "opendatahub") is None
    assert live(cp, "clusterrole", "maas-console-admin") is None
    assert live(cp, "clusterrolebinding", "maas-console-auth-delegator") is None
    assert live(cp, "secret", "billing-ledger", "opendatahub") is not None, "the ledger URL is the user's"
    assert live(cp, "namespace", "opendatahub") is not None, "the controller namespace may be shared"
    # User resources, the API and the subscription namespace stay.
    assert live(cp, "crd", f"maassubscriptions.{MAAS}") is not None
    assert {n: version(cp, "maassubscriptions", n, DEFAULT_SUBSCRIPTION_NS) for n in subs} == subs
    assert not admission_allows(cp, "default")
    script(cp, "uninstall.sh")  # nothing left to remove: still fine

    # --all: MaaS resources go too, even one holding the controller's finalizer with no controller running.
    kubectl("patch", "maassubscription", "free", "-n", DEFAULT_SUBSCRIPTION_NS, "--type=merge",
            "-p", '{"metadata":{"finalizers":["maas.opendatahub.io/finalizer"]}}', kubeconfig=cp.kubeconfig)
    # and the reference's kinds (deleted first: a running controller would generate ExternalModels from them)
    kubectl("apply", "-f", "-", kubeconfig=cp.kubeconfig, stdin=(
        "apiVersion: inference.opendatahub.io/v1alpha1\nkind: ExternalProvider\n"
        "metadata: {name: openai, namespace: llm}\nspec: {provider: openai, endpoint: api.openai.com, "
        "auth: {type: simple, secretRef: {name: openai-upstream-key}}}\n"))
    script(cp, "uninstall.sh", "--all", "--timeout", "60")
    assert live(cp, "crd", f"maassubscriptions.{MAAS}") is None
    assert live(cp, "crd", "externalproviders.inference.opendatahub.io") is None
    assert live(cp, "validatingadmissionpolicy", "maas-subscription-namespace") is None
    assert live(cp, "namespace", DEFAULT_SUBSCRIPTION_NS) is None
    script(cp, "uninstall.sh", "--all")


def test_dev_overlay_binds_the_admission_policy_to_its_subscription_namespace(cluster: ControlPlane) -> None:
    cp = cluster
    script(cp, "deploy.sh", "--overlay", "dev", "--no-wait-pods")
    assert live(cp, "deployment", "maas-controller", "maas-dev") is not None
    assert live(cp, "deployment", "maas-console", "maas-dev") is not None  # one replica, sessions in the process
    secret = live(cp, "secret", "maas-api-db", "maas-dev")
    assert secret is not None and "database-url" in secret["data"]
    assert admission_allows(cp, "maas-dev-subscriptions")
    assert not admission_allows(cp, DEFAULT_SUBSCRIPTION_NS)
    script(cp, "deploy.sh", "--overlay", "dev", "--no-wait-pods")
    script(cp, "uninstall.sh", "--overlay", "dev")
    assert live(cp, "deployment", "maas-controller", "maas-dev") is None
    assert live(cp, "namespace", "maas-dev-subscriptions") is not None
