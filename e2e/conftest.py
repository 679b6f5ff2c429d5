"""End-to-end journeys over real HTTP against a cluster: the suite's own local stack (`E2E_CLUSTER=local`, the
default) or one someone else started (`E2E_CLUSTER=external`, configured by `E2E_*` variables: docs/e2e.md).

Journeys use only the `world` fixture (`World`; the fixtures are in `e2e/fixtures.py`) and `e2e.target.Need`;
each works in a namespace and objects of its own, labelled with the run id and removed afterwards even when the
journey fails.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from kubernetes_asyncio import client as k8s

from e2e.cleanup import Cleanup, labelled
from e2e.target import Need, Target
from e2e.waits import PROBE_BODY, eventually
from maasctl.contract.organizations import ORG_ADMINS_KEY, ORG_ADMINS_LABEL
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.reconcilers.kinds import LLM_INFERENCE_SERVICE
from maasctl.runtime import Client
from maasctl.tls import default_tls

__all__ = ["MAAS", "Need", "World", "eventually"]

MAAS = "maas.opendatahub.io/v1alpha1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """With `E2E_NO_SKIPS=1` (CI) a skipped journey fails: a skip must never count as a pass there."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("E2E_NO_SKIPS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in a run where every journey must run (E2E_NO_SKIPS=1): {reason}"


@dataclass
class World:
    """One journey's view of the cluster: its own model namespace and helpers for people and operators.

    Users (`alice`, `bob`, `carol`) and groups (`premium-users`, `free-users`) are logical names; the helpers
    translate them to the cluster's (`username`, `group`), so journeys read the same in both modes.
    """

    stack: Target
    namespace: str
    suffix: str
    cleanup: Cleanup = field(repr=False)

    @property
    def client(self) -> Client:
        return Client(self.stack.api)

    def require(self, *needs: Need) -> None:
        """Skip this journey, naming what is missing, unless the cluster provides every need."""
        missing = [n.value for n in needs if self.stack.missing(n)]
        if missing:
            pytest.skip(f"E2E_CLUSTER={self.stack.mode} lacks " + "; ".join(missing))

    def token(self, user: str) -> str:
        return self.stack.identities.token(user)

    def username(self, user: str) -> str:
        """The name maas-api and the gateway see for a logical user (e.g. `system:serviceaccount:ns:alice`)."""
        return self.stack.identities.username(user)

    def group(self, name: str) -> str:
        return self.stack.identities.group(name)

    async def apply(self, *objs: dict[str, Any]) -> None:
        """Server-side apply, labelled with the run id; objects outside the namespace are deleted afterwards."""
        for obj in objs:
            obj = labelled(obj, self.stack.run_id)
            if obj["metadata"].get("namespace") != self.namespace:
                self.cleanup.track(obj)
            await self.client.apply(obj, field_manager="e2e-operator")

    def sub_ns(self) -> str:
        return self.stack.settings.subscription_namespace

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    async def mint(self, user: str, subscription: str | None = None, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"name": f"key-{uuid.uuid4().hex[:6]}", **extra}
        if subscription:
            body["subscription"] = subscription
        async with httpx.AsyncClient(base_url=self.stack.api_url, timeout=10, verify=default_tls()) as http:
            resp = await http.post("/v1/api-keys", json=body, headers={"Authorization": f"Bearer {self.token(user)}"})
            if resp.status_code == 429 and "key_mint_rate_limited" in resp.text:
                # maas-api bounds mints per user and minute (docs/security.md); a suite sharing one stack mints
                # more than a person does, so it waits as a client is told to, once.
                await asyncio.sleep(min(float(resp.headers.get("retry-after") or 60), 61))
                resp = await http.post("/v1/api-keys", json=body,
                                       headers={"Authorization": f"Bearer {self.token(user)}"})
        assert resp.status_code == 201, resp.text
        minted: dict[str, Any] = resp.json()
        self.cleanup.keys.append((self.token(user), str(minted["id"])))
        return minted

    async def chat(self, model: str, credential: str, *, headers: dict[str, str] | None = None,
                   gateway_url: str | None = None, timeout: float = 30, **body: Any) -> httpx.Response:
        payload = {**PROBE_BODY, **body}
        async with httpx.AsyncClient(base_url=gateway_url or self.stack.gateway_url, timeout=timeout,
                                     verify=default_tls()) as http:
            return await http.post(f"/{self.namespace}/{model}/v1/chat/completions", json=payload,
                                   headers={"Authorization": f"Bearer {credential}", **(headers or {})})

    async def models(self, credential: str, headers: dict[str, str] | None = None) -> list[str]:
        async with httpx.AsyncClient(base_url=self.stack.api_url, timeout=30, verify=default_tls()) as http:
            resp = await http.get("/v1/models", headers={"Authorization": f"Bearer {credential}", **(headers or {})})
        assert resp.status_code == 200, resp.text
        return sorted(m["owned_by"] for m in resp.json()["data"] if m["owned_by"].startswith(f"{self.namespace}/"))

    async def model_requests(self) -> list[dict[str, Any]]:
        """What the test model received, oldest first (skips the journey without a request log)."""
        self.require(Need.MODEL_REQUESTS)
        assert self.stack.model_requests_url is not None
        async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
            resp = await http.get(self.stack.model_requests_url)
        assert resp.status_code == 200, f"request log {self.stack.model_requests_url}: {resp.status_code}"
        seen: list[dict[str, Any]] = resp.json()
        return seen

    def admin_headers(self) -> dict[str, str]:
        """Authorization of a maas-api administrator (skips the journey without one)."""
        self.require(Need.ADMIN_TOKEN)
        assert self.stack.admin_token_file is not None
        return {"Authorization": f"Bearer {self.stack.admin_token_file.read_text().strip()}"}

    # -- operator objects ------------------------------------------------------------------------------
    def external_model(self, name: str) -> list[dict[str, Any]]:
        ns = self.namespace
        return [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": ns},
             "stringData": {"api-key": self.stack.upstream_key}},
            {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": "provider", "namespace": ns},
             "spec": {"provider": "openai", "endpoint": f"{self.stack.model_url}/v1", "targetModel": "gpt-x",
                      "credentialRef": {"name": "provider-key"}}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
             "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}},
        ]

    def workload_service(self, name: str, url: str) -> dict[str, Any]:
        """A Service `name` in the journey's namespace whose traffic reaches the model server at `url`, on the
        URL's port (routes must use `spec.ports[0].port`): on maasctl's data plane a ClusterIP Service annotated
        with the URL (what it dials instead of a pod), on a real gateway an ExternalName Service (the backend
        kind ExternalModels rely on too)."""
        parts = urlsplit(url)
        scheme = parts.scheme or "http"
        port = parts.port or (443 if scheme == "https" else 80)
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace}
        if not self.stack.missing(Need.MAASCTL_DATA_PLANE):
            return {"apiVersion": "v1", "kind": "Service",
                    "metadata": {**meta, "annotations": {LOCAL_URL_ANNOTATION: url}},
                    "spec": {"ports": [{"name": "http", "port": port}], "selector": {"app": name}}}
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"type": "ExternalName", "externalName": parts.hostname,
                         "ports": [{"name": scheme, "port": port, "protocol": "TCP", "appProtocol": scheme}]}}

    def in_cluster_model(self, name: str, gateway: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """An LLMInferenceService `name` with the route and workload Service KServe would create (no label of
        ours on the route), served by the in-cluster test model, and its MaaSModelRef (needs INCLUSTER_MODEL).
        The route is attached to `gateway` (namespace, name), by default the stack's Gateway."""
        self.require(Need.INCLUSTER_MODEL)
        ns, stack = self.namespace, self.stack
        gw_ns, gw_name = gateway or (stack.settings.gateway_namespace, stack.settings.gateway_name)
        assert stack.incluster_model_url is not None
        workload = self.workload_service(f"{name}-workload", stack.incluster_model_url)
        port = workload["spec"]["ports"][0]["port"]
        return [
            {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
             "metadata": {"name": name, "namespace": ns},
             # the route below stands in for KServe's: the LLMInferenceService names it (`refs`)
             "spec": {"router": {"route": {"http": {"refs": [{"name": f"{name}-kserve-route"}]}}}}},
            workload,
            {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": f"{name}-kserve-route", "namespace": ns, "labels": {
                 "app.kubernetes.io/name": name, "app.kubernetes.io/component": "llminferenceservice-router",
                 "app.kubernetes.io/part-of": "llminferenceservice"}},
             "spec": {"parentRefs": [{"name": gw_name, "namespace": gw_ns}],
                      "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{name}"}}],
                                 "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                     "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                 "backendRefs": [{"name": f"{name}-workload", "port": port}]}]}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
             "spec": {"modelRef": {"kind": "LLMInferenceService", "name": name}}},
        ]

    async def mark_ready(self, llm: str, gateway_url: str | None = None) -> None:
        """What KServe reports once the LLMInferenceService is up: its URL on the gateway."""
        await self.client.patch(
            LLM_INFERENCE_SERVICE, llm, self.namespace,
            {"status": {"url": f"{gateway_url or self.stack.gateway_url}/{self.namespace}/{llm}", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            subresource="status")

    def auth_policy(self, name: str, models: list[str], groups: tuple[str, ...] = (),
                    users: tuple[str, ...] = ()) -> dict[str, Any]:
        subjects: dict[str, Any] = {}
        if groups:
            subjects["groups"] = [{"name": g} for g in self.stack.identities.groups(groups)]
        if users:
            subjects["users"] = self.stack.identities.usernames(users)
        return {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": name, "namespace": self.sub_ns()},
                "spec": {"modelRefs": [{"name": m, "namespace": self.namespace} for m in models],
                         "subjects": subjects}}

    def subscription(self, name: str, models: dict[str, list[tuple[int, str]] | None], *,
                     groups: tuple[str, ...] = (), users: tuple[str, ...] = (), priority: int = 0,
                     organization: str | None = None, gateway: tuple[str, str] | None = None) -> dict[str, Any]:
        owner: dict[str, Any] = {}
        if groups:
            owner["groups"] = [{"name": g} for g in self.stack.identities.groups(groups)]
        if users:
            owner["users"] = self.stack.identities.usernames(users)
        refs = []
        for model, tiers in models.items():
            ref: dict[str, Any] = {"name": model, "namespace": self.namespace}
            if tiers is None:
                ref["unlimited"] = True
            else:
                ref["tokenRateLimits"] = [{"limit": limit, "window": window} for limit, window in tiers]
            refs.append(ref)
        spec: dict[str, Any] = {"owner": owner, "modelRefs": refs, "priority": priority}
        if organization is not None:
            spec["organization"] = {"id": organization}
        if gateway is not None:
            spec["gatewayRef"] = {"namespace": gateway[0], "name": gateway[1]}
        return {"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": name, "namespace": self.sub_ns()},
                "spec": spec}

    def organization_admins(self, name: str, admins: dict[str, tuple[str, ...]], *,
                            raw: str | None = None) -> dict[str, Any]:
        """A ConfigMap of the organization-admin mapping (docs/organizations.md): organization id -> logical
        groups (translated to the cluster's), or `raw` document text as is."""
        text = raw if raw is not None else yaml.safe_dump(
            [{"id": org, "adminGroups": self.stack.identities.groups(groups)} for org, groups in admins.items()])
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.sub_ns(), "labels": {ORG_ADMINS_LABEL: "true"}},
                "data": {ORG_ADMINS_KEY: text}}

    # -- waits: one helper, the cluster's own source of truth --------------------------------------------
    async def wait_active(self, *subscriptions: str, timeout: float = 60) -> None:
        custom = k8s.CustomObjectsApi(self.stack.api)
        last: dict[str, str] = {}

        async def active() -> bool:
            for sub in subscriptions:
                obj = await custom.get_namespaced_custom_object(
                    "maas.opendatahub.io", "v1alpha1", self.sub_ns(), "maassubscriptions", sub)
                status = obj.get("status") or {}
                if status.get("phase") != "Active":
                    ready: dict[str, Any] = next(
                        (c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
                    last["why"] = f"{sub} is {status.get('phase') or 'without status'}: {ready.get('message', '')}"
                    return False
            return True

        await eventually(active, timeout, describe=lambda: last.get("why", ""))

    async def wait_in_force(self, model: str, credential: str, timeout: float = 60) -> None:
        """Until the data plane reports the model's policies in force for this credential, without a call: a call
        served before the caller's token limit reached the gateway would not count towards it."""
        plane = self.stack.data_plane
        last = {"why": "not checked yet"}

        async def in_force() -> bool:
            why = await plane.not_ready(self.namespace, model, credential)
            last["why"] = why or ""
            return why is None

        await eventually(in_force, timeout, describe=lambda: last["why"])

    async def wait_enforced(self, model: str, credential: str, timeout: float = 60) -> None:
        """Until the data plane reports the model's policies in force and the gateway serves the model for this
        credential (one successful call: 15 tokens are charged)."""
        plane = self.stack.data_plane
        last = {"why": "not checked yet"}

        async def served() -> bool:
            why = await plane.not_ready(self.namespace, model, credential)
            if why is not None:
                last["why"] = why
                return False
            resp = await self.chat(model, credential)
            if resp.status_code == 200:
                return True
            last["why"] = f"{plane.name} reports the policies in force; the gateway answers {resp.status_code}"
            return False

        await eventually(served, timeout, describe=lambda: last["why"])
