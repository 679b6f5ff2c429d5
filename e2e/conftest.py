"""End-to-end journeys: the real local control plane, the controller, maas-api, the local data plane and test
models, each a separate process talking HTTP (`maasctl.localstack`). Each journey works in namespaces and
objects of its own, so journeys never see each other's state.

`E2E_CLUSTER=kind` would target a kind cluster with the real Kuadrant stack (docs/e2e.md); it needs Docker
and network access and is not run here.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl import samples
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY, LLM_INFERENCE_SERVICE
from maasctl.runtime import Client
from maasctl.settings import ControllerSettings

MAAS = "maas.opendatahub.io/v1alpha1"
SETTINGS = ControllerSettings(gateway_name="maas-default-gateway", gateway_namespace="maas-gateway",
                              leader_election_namespace="opendatahub", max_concurrent_reconciles=4)


@pytest.fixture(scope="session")
async def stack() -> AsyncIterator[LocalStack]:
    if os.environ.get("E2E_CLUSTER", "local") != "local":
        pytest.fail("only E2E_CLUSTER=local runs on this machine; see docs/e2e.md for kind")
    with tempfile.TemporaryDirectory(prefix="maasctl-e2e-") as tmp:
        stack = LocalStack(StackOptions(directory=Path(tmp), settings=SETTINGS, controller_process=True))
        await stack.start()
        try:
            client = Client(stack.api)
            port = int(stack.gateway_url.rsplit(":", 1)[1])
            await client.apply(samples.gateway(stack.settings, port), field_manager="e2e")
            await client.patch(GATEWAY, SETTINGS.gateway_name, SETTINGS.gateway_namespace, samples.gateway_status(),
                               subresource="status")
            yield stack
        finally:
            await stack.stop()


@dataclass
class World:
    """One journey's view of the stack: its own model namespace and helpers for people and operators."""

    stack: LocalStack
    namespace: str
    suffix: str

    @property
    def client(self) -> Client:
        return Client(self.stack.api)

    def token(self, user: str) -> str:
        return self.stack.control_plane.users[user].token

    async def apply(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            await self.client.apply(obj, field_manager="e2e-operator")

    def sub_ns(self) -> str:
        return self.stack.settings.subscription_namespace

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    async def mint(self, user: str, subscription: str | None = None, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"name": f"key-{uuid.uuid4().hex[:6]}", **extra}
        if subscription:
            body["subscription"] = subscription
        async with httpx.AsyncClient(base_url=self.stack.api_url, timeout=10) as http:
            resp = await http.post("/v1/api-keys", json=body, headers={"Authorization": f"Bearer {self.token(user)}"})
        assert resp.status_code == 201, resp.text
        minted: dict[str, Any] = resp.json()
        return minted

    async def chat(self, model: str, credential: str, *, headers: dict[str, str] | None = None,
                   **body: Any) -> httpx.Response:
        payload = {"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}], **body}
        async with httpx.AsyncClient(base_url=self.stack.gateway_url, timeout=30) as http:
            return await http.post(f"/{self.namespace}/{model}/v1/chat/completions", json=payload,
                                   headers={"Authorization": f"Bearer {credential}", **(headers or {})})

    async def models(self, credential: str, headers: dict[str, str] | None = None) -> list[str]:
        async with httpx.AsyncClient(base_url=self.stack.api_url, timeout=30) as http:
            resp = await http.get("/v1/models", headers={"Authorization": f"Bearer {credential}", **(headers or {})})
        assert resp.status_code == 200, resp.text
        return sorted(m["owned_by"] for m in resp.json()["data"] if m["owned_by"].startswith(f"{self.namespace}/"))

    # -- operator objects ------------------------------------------------------------------------------
    def external_model(self, name: str) -> list[dict[str, Any]]:
        ns = self.namespace
        return [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": ns},
             "stringData": {"api-key": self.stack.options.upstream_key}},
            {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": "provider", "namespace": ns},
             "spec": {"provider": "openai", "endpoint": f"{self.stack.model_url}/v1", "targetModel": "gpt-x",
                      "credentialRef": {"name": "provider-key"}}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
             "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}},
        ]

    def in_cluster_model(self, name: str) -> list[dict[str, Any]]:
        """An LLMInferenceService `name` with the route and workload Service KServe would create (no label of
        ours on the route), served by the stack's in-cluster test model, and its MaaSModelRef."""
        ns, stack = self.namespace, self.stack
        return [
            {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
             "metadata": {"name": name, "namespace": ns}, "spec": {}},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": f"{name}-workload", "namespace": ns,
                          "annotations": {"maasctl.opendatahub.io/local-url": stack.incluster_model_url}},
             "spec": {"ports": [{"name": "http", "port": 8000}], "selector": {"app": name}}},
            {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": f"{name}-kserve-route", "namespace": ns, "labels": {
                 "app.kubernetes.io/name": name, "app.kubernetes.io/component": "llminferenceservice-router",
                 "app.kubernetes.io/part-of": "llminferenceservice"}},
             "spec": {"parentRefs": [{"name": stack.settings.gateway_name,
                                      "namespace": stack.settings.gateway_namespace}],
                      "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{name}"}}],
                                 "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                     "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                 "backendRefs": [{"name": f"{name}-workload", "port": 8000}]}]}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
             "spec": {"modelRef": {"kind": "LLMInferenceService", "name": name}}},
        ]

    async def mark_ready(self, llm: str) -> None:
        """What KServe reports once the LLMInferenceService is up: its URL on the gateway."""
        await self.client.patch(
            LLM_INFERENCE_SERVICE, llm, self.namespace,
            {"status": {"url": f"{self.stack.gateway_url}/{self.namespace}/{llm}", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            subresource="status")

    def auth_policy(self, name: str, models: list[str], groups: tuple[str, ...] = (),
                    users: tuple[str, ...] = ()) -> dict[str, Any]:
        subjects: dict[str, Any] = {}
        if groups:
            subjects["groups"] = [{"name": g} for g in groups]
        if users:
            subjects["users"] = list(users)
        return {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": name, "namespace": self.sub_ns()},
                "spec": {"modelRefs": [{"name": m, "namespace": self.namespace} for m in models],
                         "subjects": subjects}}

    def subscription(self, name: str, models: dict[str, list[tuple[int, str]] | None], *,
                     groups: tuple[str, ...] = (), users: tuple[str, ...] = (), priority: int = 0) -> dict[str, Any]:
        owner: dict[str, Any] = {}
        if groups:
            owner["groups"] = [{"name": g} for g in groups]
        if users:
            owner["users"] = list(users)
        refs = []
        for model, tiers in models.items():
            ref: dict[str, Any] = {"name": model, "namespace": self.namespace}
            if tiers is None:
                ref["unlimited"] = True
            else:
                ref["tokenRateLimits"] = [{"limit": limit, "window": window} for limit, window in tiers]
            refs.append(ref)
        return {"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": name, "namespace": self.sub_ns()},
                "spec": {"owner": owner, "modelRefs": refs, "priority": priority}}

    async def wait_active(self, *subscriptions: str, timeout: float = 60) -> None:
        custom = k8s.CustomObjectsApi(self.stack.api)

        async def active() -> bool:
            for sub in subscriptions:
                obj = await custom.get_namespaced_custom_object(
                    "maas.opendatahub.io", "v1alpha1", self.sub_ns(), "maassubscriptions", sub)
                if (obj.get("status") or {}).get("phase") != "Active":
                    return False
            return True

        await eventually(active, timeout)

    async def wait_enforced(self, model: str, credential: str, timeout: float = 60) -> None:
        """Until the gateway serves the model for this credential (policies generated and picked up)."""

        async def served() -> bool:
            return (await self.chat(model, credential)).status_code == 200

        await eventually(served, timeout)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0, interval: float = 0.2) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@pytest.fixture
async def world(stack: LocalStack) -> AsyncIterator[World]:
    suffix = uuid.uuid4().hex[:6]
    namespace = f"e2e-{suffix}"
    await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    yield World(stack, namespace, suffix)
