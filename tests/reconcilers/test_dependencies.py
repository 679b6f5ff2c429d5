"""Missing third-party APIs are reported in status and picked up without a restart once installed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents, third_party_crd_files, wait_established
from tests.reconcilers.conftest import GATEWAY_NS, SUB_NS, Objects, ensure_namespace, eventually, start_controller
from tests.reconcilers.test_core_flow import publish_external, subscription


def _crds(folder_prefix: str) -> list[dict[str, Any]]:
    return load_documents(p for p in third_party_crd_files() if p.parent.name.startswith(folder_prefix))


@pytest.fixture
async def bare_cluster() -> AsyncIterator[ControlPlane]:
    """A second control plane with MaaS and Gateway API CRDs but no Kuadrant."""
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    try:
        with cp.http_client() as http:
            wait_established(http, apply_documents(http, _crds("gateway-api-v"), field_manager="test"))
        api = await connect(str(cp.kubeconfig))
        try:
            await install_crds(api, subscription_namespace=SUB_NS)
            core = k8s.CoreV1Api(api)
            for ns in (SUB_NS, GATEWAY_NS, "models"):
                await ensure_namespace(core, ns)
        finally:
            await api.close()
        yield cp
    finally:
        await asyncio.to_thread(cp.stop)


async def test_kuadrant_installed_after_start_is_picked_up(bare_cluster: ControlPlane) -> None:
    running = await start_controller(bare_cluster)
    api = await connect(str(bare_cluster.kubeconfig))
    objs = Objects(api)
    try:
        await publish_external(objs, api, "models", "m")
        await objs.create(subscription("dep-sub", [("models", "m")], "free-users", 100))

        async def waiting_for_kuadrant() -> dict[str, Any] | None:
            sub = await objs.get("MaaSSubscription", SUB_NS, "dep-sub")
            conditions = (sub or {}).get("status", {}).get("conditions") or []
            ready = next((c for c in conditions if c["type"] == "Ready"), None)
            return ready if ready and ready["reason"] == "DependencyMissing" else None

        ready = await eventually(waiting_for_kuadrant)
        assert "TokenRateLimitPolicy" in ready["message"]
        sub = await objs.get("MaaSSubscription", SUB_NS, "dep-sub")
        assert sub is not None and sub["status"]["phase"] == "Pending"

        with bare_cluster.http_client() as http:
            wait_established(http, apply_documents(http, _crds("kuadrant"), field_manager="test"))

        async def active() -> bool:
            sub = await objs.get("MaaSSubscription", SUB_NS, "dep-sub")
            trlp = await objs.get("TokenRateLimitPolicy", "models", "maas-trlp-m")
            return bool(trlp and (sub or {}).get("status", {}).get("phase") == "Active")

        await eventually(active, timeout=60)
    finally:
        await running.stop()
        await api.close()
