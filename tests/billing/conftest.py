"""Billing fixtures on the session control plane: the billing CRDs installed once, helpers to create objects."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api import GROUP, KINDS, VERSION
from maasctl.billing.api.install import install_billing_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane

PLURAL = {kind.__name__: kind.crd.plural for kind in KINDS}
CLUSTER_SCOPED = {kind.__name__ for kind in KINDS if kind.crd.scope == "Cluster"}


@pytest.fixture(scope="session")
async def billing_cluster(control_plane: ControlPlane) -> AsyncIterator[ControlPlane]:
    """The session control plane with the billing CRDs installed."""
    api = await connect(str(control_plane.kubeconfig))
    try:
        await install_billing_crds(api)
    finally:
        await api.close()
    yield control_plane


class Billing:
    """Create/read/patch billing objects as the admin, in whatever namespace the object names."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)

    async def create(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        kind = obj["kind"]
        if kind in CLUSTER_SCOPED:
            out = await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL[kind], obj,
                                                                 field_validation="Strict", **kw)
        else:
            out = await self.custom.create_namespaced_custom_object(
                GROUP, VERSION, obj["metadata"]["namespace"], PLURAL[kind], obj, field_validation="Strict", **kw)
        return out  # type: ignore[no-any-return]

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            if kind in CLUSTER_SCOPED:
                return await self.custom.get_cluster_custom_object(  # type: ignore[no-any-return]
                    GROUP, VERSION, PLURAL[kind], name)
            return await self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
                GROUP, VERSION, namespace, PLURAL[kind], name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch(self, kind: str, name: str, namespace: str, body: Any, *, status: bool = False) -> dict[str, Any]:
        call = (self.custom.patch_namespaced_custom_object_status if status
                else self.custom.patch_namespaced_custom_object)
        return await call(GROUP, VERSION, namespace, PLURAL[kind], name, body,  # type: ignore[no-any-return]
                          _content_type="application/merge-patch+json")

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            if kind in CLUSTER_SCOPED:
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL[kind], name)
            else:
                await self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL[kind], name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def billing(billing_cluster: ControlPlane, kube: k8s.ApiClient) -> Billing:
    return Billing(kube)


def error_message(exc: k8s.ApiException) -> str:
    try:
        return str(json.loads(exc.body or b"")["message"])
    except (ValueError, KeyError, TypeError):
        return str(exc.body)
