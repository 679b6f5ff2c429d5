"""A running controller (the real Manager with the MaaS controllers) against the session control plane."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.app import build_manager
from maasctl.runtime import Manager
from maasctl.runtime.connect import connect
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane
from maasctl.testenv.seed import third_party_seed
from tests.install.manifests import controller_api

SUB_NS = "models-as-a-service"
GATEWAY_NS = "maas-gateway"
GATEWAY_NAME = "maas-default-gateway"

SETTINGS = ControllerSettings(
    subscription_namespace=SUB_NS,
    gateway_name=GATEWAY_NAME,
    gateway_namespace=GATEWAY_NS,
    maas_api_url="http://127.0.0.1:8089",
    metrics_bind_address="0",
    health_probe_bind_address="0",
    max_concurrent_reconciles=2,
)


async def ensure_namespace(core: k8s.CoreV1Api, name: str) -> None:
    try:
        await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture(scope="session")
async def maas_cluster(control_plane: ControlPlane) -> AsyncIterator[ControlPlane]:
    """The session control plane with MaaS CRDs, admission policy, namespaces and a Gateway installed."""
    await install_maas(control_plane)
    yield control_plane


@contextlib.asynccontextmanager
async def own_maas_cluster(exclude_groups: tuple[str, ...] = ()) -> AsyncIterator[ControlPlane]:
    """A control plane of its own (no leftovers of other tests), set up like `maas_cluster`, without the
    third-party CRDs of `exclude_groups`."""
    seed = await asyncio.to_thread(third_party_seed, exclude_groups=exclude_groups)
    cp = ControlPlane(with_controller_manager=False, etcd_seed=seed)
    await asyncio.to_thread(cp.start)
    try:
        await install_maas(cp)
        yield cp
    finally:
        await asyncio.to_thread(cp.stop)


@pytest.fixture
async def fresh_maas_cluster() -> AsyncIterator[ControlPlane]:
    """A control plane of its own (no leftovers of other tests), set up like `maas_cluster`."""
    async with own_maas_cluster() as cp:
        yield cp


async def install_maas(control_plane: ControlPlane) -> None:
    """MaaS CRDs, the admission policy, the subscription and gateway namespaces and the Gateway."""
    api = await connect(str(control_plane.kubeconfig))
    try:
        await install_crds(api, subscription_namespace=SUB_NS)
        core = k8s.CoreV1Api(api)
        for ns in (SUB_NS, GATEWAY_NS):
            await ensure_namespace(core, ns)
        gateway = {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NS},
            "spec": {
                "gatewayClassName": "maasctl-local",
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "maas.example.test",
                               "allowedRoutes": {"namespaces": {"from": "All"}}}],
            },
        }
        with contextlib.suppress(k8s.ApiException):
            await k8s.CustomObjectsApi(api).create_namespaced_custom_object(
                "gateway.networking.k8s.io", "v1", GATEWAY_NS, "gateways", gateway)
    finally:
        await api.close()


@dataclass
class RunningController:
    manager: Manager
    task: asyncio.Task[None]
    api: k8s.ApiClient

    async def stop(self) -> None:
        self.manager.stop()
        await asyncio.wait_for(self.task, 40)
        await self.api.close()


async def start_controller(cp: ControlPlane, settings: ControllerSettings = SETTINGS) -> RunningController:
    """Run the controller as its ServiceAccount with the RBAC of manifests/ (applied first), never as admin:
    a permission the install lacks fails the test that needs it."""
    api = await controller_api(cp, settings.leader_election_namespace, settings.subscription_namespace)
    manager = build_manager(api, settings)
    task = asyncio.create_task(manager.run())
    return RunningController(manager, task, api)


@pytest.fixture
async def controller(maas_cluster: ControlPlane) -> AsyncIterator[RunningController]:
    running = await start_controller(maas_cluster)
    try:
        yield running
    finally:
        await running.stop()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll `check` until it returns a truthy value (returned) or raises no AssertionError."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = await check()
            if value:
                return value
        except (AssertionError, k8s.ApiException) as exc:
            last = exc
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached in {timeout}s; last error: {last!r}")
        await asyncio.sleep(interval)


PLURALS = {
    "MaaSModelRef": ("maas.opendatahub.io", "v1alpha1", "maasmodelrefs"),
    "ExternalModel": ("maas.opendatahub.io", "v1alpha1", "externalmodels"),
    "MaaSAuthPolicy": ("maas.opendatahub.io", "v1alpha1", "maasauthpolicies"),
    "MaaSSubscription": ("maas.opendatahub.io", "v1alpha1", "maassubscriptions"),
    "HTTPRoute": ("gateway.networking.k8s.io", "v1", "httproutes"),
    "Gateway": ("gateway.networking.k8s.io", "v1", "gateways"),
    "AuthPolicy": ("kuadrant.io", "v1", "authpolicies"),
    "TokenRateLimitPolicy": ("kuadrant.io", "v1alpha1", "tokenratelimitpolicies"),
    "LLMInferenceService": ("serving.kserve.io", "v1alpha2", "llminferenceservices"),
}


@dataclass
class Objects:
    """Thin typed-by-kind helpers over CustomObjectsApi for the tests."""

    api: k8s.ApiClient

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version, plural = PLURALS[obj["kind"]]
        ns = obj["metadata"]["namespace"]
        return await self.custom.create_namespaced_custom_object(group, version, ns, plural, obj)  # type: ignore[no-any-return]

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        group, version, plural = PLURALS[kind]
        try:
            return await self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)  # type: ignore[no-any-return]
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch(self, kind: str, namespace: str, name: str, body: Any) -> dict[str, Any]:
        group, version, plural = PLURALS[kind]
        return await self.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
            group, version, namespace, plural, name, body, _content_type="application/merge-patch+json")

    async def patch_status(self, kind: str, namespace: str, name: str, body: Any) -> dict[str, Any]:
        group, version, plural = PLURALS[kind]
        return await self.custom.patch_namespaced_custom_object_status(  # type: ignore[no-any-return]
            group, version, namespace, plural, name, body, _content_type="application/merge-patch+json")

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        group, version, plural = PLURALS[kind]
        try:
            await self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def objs(kube: k8s.ApiClient) -> Objects:
    return Objects(kube)
