"""KuadrantNotInstalled: on a control plane without Kuadrant's CRDs a Plan says so and applies nothing; when
the CRDs are installed the controller notices by itself and compiles the Plan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.install import install_billing_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents, third_party_crd_files, wait_established

from .conftest import Billing, eventually, start_billing
from .test_plan_reconciler import AP, GW, NAME, Cluster, gateway, plan, wait_condition

pytestmark = pytest.mark.integration


def crd_files(prefix: str) -> list[Path]:
    return [p for p in third_party_crd_files() if p.name.startswith(prefix)]


def install(cp: ControlPlane, files: list[Path]) -> None:
    with cp.http_client() as http:
        wait_established(http, apply_documents(http, load_documents(files), field_manager="tests"))


@pytest.fixture
async def bare_cluster() -> AsyncIterator[ControlPlane]:
    """A control plane of its own with Gateway API and the billing CRDs, but no Kuadrant and no Kueue."""
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    try:
        await asyncio.to_thread(install, cp, crd_files("gateway.networking.k8s.io_"))
        api = await connect(str(cp.kubeconfig))
        try:
            await install_billing_crds(api)
        finally:
            await api.close()
        yield cp
    finally:
        await asyncio.to_thread(cp.stop)


async def test_kuadrant_missing_then_installed(bare_cluster: ControlPlane) -> None:
    running = await start_billing(bare_cluster)
    api = await connect(str(bare_cluster.kubeconfig))
    try:
        ns = "tenants"
        await k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        billing, cluster = Billing(api), Cluster(api)
        await cluster.create(GW, gateway(ns))
        await billing.create(plan(ns, requestsPerMinute=60))
        cond = await wait_condition(billing, ns, "KuadrantNotInstalled", "True", "CRDsMissing")
        assert "RateLimitPolicy.kuadrant.io" in cond["message"]
        compiled = await wait_condition(billing, ns, "Compiled", "False", "KuadrantNotInstalled")
        assert "nothing was applied" in compiled["message"]
        obj = await billing.get("Plan", "priority", ns)
        assert obj is not None and not any(r["upToDate"] for r in obj["status"]["compiledPolicies"])

        await asyncio.to_thread(install, bare_cluster, crd_files("kuadrant.io_"))
        await wait_condition(billing, ns, "KuadrantNotInstalled", "False", "KuadrantInstalled")
        await wait_condition(billing, ns, "Compiled", "True")

        async def applied() -> bool:
            return await cluster.get(AP, NAME, ns) is not None

        await eventually(applied)
    finally:
        await running.stop()
        await api.close()
