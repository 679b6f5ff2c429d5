"""The local gateway in front of a payload processor, on the real control plane and the real controller.

client -> gateway (Envoy + Authorino + Limitador: route, auth, request limits) -> gRPC -> processor (metering,
reservation, provider key, settle and record) -> test model. Each process part runs in this event loop, talking
over loopback HTTP and gRPC: the processor's plane has its own informers, counters and usage sink.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl.builders.maasapi import NAME as MAAS_API
from maasctl.builders.maasapi import maas_api_auth_policy, maas_api_route
from maasctl.builders.refs import GatewayRef
from maasctl.gateway import Gateway, GatewaySettings, start_http
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.gateway.server import HttpServer
from maasctl.gateway.usage import MemorySink
from maasctl.payload.adapter import ProcessorStages
from maasctl.payload.server import ProcessorServer, start_processor
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testmodel import ModelServerConfig, create_app
from maasctl.tls import default_tls
from tests.gateway.conftest import (  # noqa: F401  (fixtures used here)
    GATEWAY_NAME,
    GATEWAY_NS,
    GATEWAY_TOKEN,
    UPSTREAM_KEY,
    MaasApiStandIn,
    controller,
    maas_cluster,
    objs,
)
from tests.gateway.test_gateway_integration import PER_CALL, chat, publish
from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually

pytestmark = pytest.mark.integration


@dataclass
class ViaProcessor:
    gateway: Gateway  # the front (role "envoy"); `publish` waits on its routes
    processor_plane: Gateway
    processor: ProcessorServer
    url: str
    model_url: str
    maas_api: MaasApiStandIn
    front_sink: MemorySink
    processor_sink: MemorySink


@pytest.fixture
async def via_processor(maas_cluster: ControlPlane) -> AsyncIterator[ViaProcessor]:  # noqa: F811
    api = await connect(str(maas_cluster.kubeconfig))
    servers: list[HttpServer] = []
    started: list[Gateway] = []
    processor: ProcessorServer | None = None
    try:
        stand_in = MaasApiStandIn(api)
        servers.append(await start_http(stand_in.app()))
        servers.append(await start_http(create_app(ModelServerConfig(models=("gpt-x",), require_bearer=UPSTREAM_KEY))))
        base = GatewaySettings(gateway_name=GATEWAY_NAME, gateway_namespace=GATEWAY_NS, maas_api_url=servers[0].url,
                               token_review_ttl=5, maas_api_token=GATEWAY_TOKEN)
        processor_sink, front_sink = MemorySink(), MemorySink()
        plane = Gateway(base, Client(api), sink=processor_sink)
        await plane.start()
        started.append(plane)
        processor = await start_processor(ProcessorStages(plane.pipeline), max_request_bytes=base.max_request_bytes)
        front_settings = GatewaySettings(**{**base.__dict__, "payload_processor": f"grpc://127.0.0.1:{processor.port}"})
        front = Gateway(front_settings, Client(api), sink=front_sink)
        await front.start()
        started.append(front)
        servers.append(await start_http(front))
        yield ViaProcessor(front, plane, processor, servers[2].url, servers[1].url, stand_in, front_sink,
                           processor_sink)
    finally:
        for server in reversed(servers):
            await server.stop()
        if processor is not None:
            await processor.stop(0)
        for gw in reversed(started):
            await gw.stop()
        await api.close()


async def _published(objs: Objects, kube: k8s.ApiClient, stack: ViaProcessor, ns: str,  # noqa: F811
                     name: str = "gpt") -> str:
    premium, _ = await publish(objs, kube, stack, ns, limit=2 * PER_CALL, name=name)  # type: ignore[arg-type]

    async def processor_sees_it() -> bool:
        snap = stack.processor_plane.state.snapshot()
        return any(r.model == f"{ns}/{name}" for r in snap.table.rules) and bool(snap.limits)

    await eventually(processor_sees_it, timeout=60)
    stack.maas_api.keys["sk-oai-alice-1"] = {"valid": True, "username": "alice", "keyId": "key-a",
                                             "groups": ["premium-users", "system:authenticated"],
                                             "subscription": f"{SUB_NS}/{premium}"}
    return premium


class TestThroughTheProcessor:
    """The payload stages run in the processor: it injects the provider key, reserves, settles and records."""

    async def test_journey(self, controller: RunningController, objs: Objects,  # noqa: F811
                           kube: k8s.ApiClient, namespace: str, via_processor: ViaProcessor) -> None:
        premium = await _published(objs, kube, via_processor, namespace)
        url = f"{via_processor.url}/{namespace}/gpt/v1/chat/completions"
        alice = {"Authorization": "Bearer sk-oai-alice-1"}
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
            first = await http.post(url, json=chat("hello"), headers=alice)
            assert first.status_code == 200, first.text
            assert first.json()["choices"][0]["message"]["content"] == "echo: hello"
            seen = (await http.get(f"{via_processor.model_url}/debug/requests")).json()[-1]["headers"]
            assert seen["authorization"] == f"Bearer {UPSTREAM_KEY}"
            assert {k for k in seen if k.startswith("x-maas-")} == {"x-maas-subscription"}  # identity removed
            assert seen["x-maas-subscription"] == premium and "sk-oai-alice-1" not in json.dumps(seen)
            spoof = await http.post(url, json=chat(), headers={**alice, "X-MaaS-Identity": "e30"})
            assert spoof.status_code == 403 and spoof.json()["error"]["code"] == "forbidden_header"  # pre stage
            # 2 x 15 = 30 tokens: the crossing request is served, then 45 > 30: the processor's reservation
            # refuses before the model
            assert (await http.post(url, json=chat(), headers=alice)).status_code == 200
            assert (await http.post(url, json=chat(), headers=alice)).status_code == 200
            calls = len((await http.get(f"{via_processor.model_url}/debug/requests")).json())
            limited = await http.post(url, json=chat(), headers=alice)
            assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
            assert len((await http.get(f"{via_processor.model_url}/debug/requests")).json()) == calls
        records = via_processor.processor_sink.records
        assert [r.status for r in records] == [200, 200, 200] and via_processor.front_sink.records == []
        assert {r.subscription for r in records} == {f"{SUB_NS}/{premium}"}

    async def test_a_stream_cut_before_its_end_is_settled_truncated(
            self, controller: RunningController, objs: Objects, kube: k8s.ApiClient,  # noqa: F811
            namespace: str, via_processor: ViaProcessor) -> None:
        """A stream that ends without its usage and `[DONE]` is recorded `truncated` and charged its estimate,
        as the in-process gateway records it (the processor used to say `complete`)."""
        await _published(objs, kube, via_processor, namespace)
        url = f"{via_processor.url}/{namespace}/gpt/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
            cut = await http.post(url, json=chat("hello", stream=True),
                                  headers={"Authorization": "Bearer sk-oai-alice-1", "x-testmodel-stream": "cut"})
            assert cut.status_code == 200 and "[DONE]" not in cut.text
        [record] = via_processor.processor_sink.records
        assert (record.status, record.termination, record.estimated) == (200, "truncated", True)

    async def test_one_base_url_is_routed_by_the_pre_filter(
            self, controller: RunningController, objs: Objects, kube: k8s.ApiClient,  # noqa: F811
            namespace: str, via_processor: ViaProcessor) -> None:
        """`/v1/chat/completions` with the model in the body: the processor's pre filter copies it into
        `x-gateway-model-name` (Envoy re-matches the route), so the model's policies and the processor's
        stages apply as on the per-model path; what cannot be routed is refused, never forwarded."""
        model = f"base-{namespace}"  # the one base URL routes by name: a name no other test publishes
        await _published(objs, kube, via_processor, namespace, model)
        url = f"{via_processor.url}/v1/chat/completions"
        alice = {"Authorization": "Bearer sk-oai-alice-1"}
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
            served = await http.post(url, json=chat("base", model=model), headers=alice)
            assert served.status_code == 200, served.text
            assert served.json()["choices"][0]["message"]["content"] == "echo: base"
            calls = len((await http.get(f"{via_processor.model_url}/debug/requests")).json())
            refusals = [
                (await http.post(url, json={"messages": []}, headers=alice), 400, "model_required"),
                (await http.post(url, json=chat(model=7), headers=alice), 400, "model_required"),
                (await http.post(url, content=b"[1]", headers={**alice, "content-type": "application/json"}), 400,
                 "model_required"),
                (await http.post(url, json=chat(model=model), headers={**alice, "X-Gateway-Model-Name": model}),
                 403, "forbidden_header"),
                (await http.post(url, json=chat(model="no-such-model"), headers=alice), 404, "route_not_found"),
                (await http.post(url, json=chat(model=model)), 401, "unauthenticated"),
            ]
            for answer, status, code in refusals:
                assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
            assert len((await http.get(f"{via_processor.model_url}/debug/requests")).json()) == calls
        records = via_processor.processor_sink.records
        assert [r.status for r in records] == [200] and records[0].model == f"{namespace}/{model}"

    async def test_a_bypass_route_is_served_without_the_processor(
            self, controller: RunningController, objs: Objects, kube: k8s.ApiClient,  # noqa: F811
            namespace: str, via_processor: ViaProcessor) -> None:
        """maas-api's route (its own AuthPolicy renders no `x-maas-identity`): in a cluster the controller renders
        Envoy's per-route bypass of both filters for it, and the Envoy side here skips the processor the same
        way; a route not on the bypass list still goes through it and is refused unidentified."""
        backend = await start_http(create_app(ModelServerConfig(models=("listed",))))  # plays maas-api
        try:
            await self._bypass(objs, kube, namespace, via_processor, backend.url)
        finally:
            await backend.stop()

    async def _bypass(self, objs: Objects, kube: k8s.ApiClient, namespace: str,  # noqa: F811
                      via_processor: ViaProcessor, backend: str) -> None:
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": MAAS_API, "namespace": namespace,
                                "annotations": {LOCAL_URL_ANNOTATION: backend}},
                   "spec": {"ports": [{"name": "http", "port": 8080}], "selector": {"app": MAAS_API}}}
        await k8s.CoreV1Api(kube).create_namespaced_service(namespace, service)
        await objs.create(maas_api_route(namespace, GatewayRef(GATEWAY_NS, GATEWAY_NAME)))
        await objs.create(maas_api_auth_policy(namespace, ()))

        async def routed() -> bool:
            rules = via_processor.gateway.state.snapshot().table.rules
            return any(r.route_key == f"{namespace}/{MAAS_API}" for r in rules)

        await eventually(routed, timeout=60)
        url = f"{via_processor.url}/maas-api/v1/models"
        alice = {"Authorization": "Bearer sk-oai-alice-1"}
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
            unlisted = await http.get(url, headers=alice)  # default bypass list: opendatahub/maas-api only
            assert (unlisted.status_code, unlisted.json()["error"]["code"]) == (403, "identity_missing")
            via_processor.gateway.settings = replace(via_processor.gateway.settings,
                                                     payload_processor_bypass_routes=(f"{namespace}/{MAAS_API}",))
            listed = await http.get(url, headers=alice)
            assert listed.status_code == 200, listed.text
            assert [m["id"] for m in listed.json()["data"]] == ["listed"]  # the backend's answer
            seen = (await http.get(f"{backend}/debug/requests")).json()[-1]["headers"]
            assert seen["authorization"] == "Bearer sk-oai-alice-1"  # maas-api authenticates the caller itself
        assert via_processor.processor_sink.records == [] and via_processor.front_sink.records == []

    async def test_processor_down_is_refused_not_served(
            self, controller: RunningController, objs: Objects, kube: k8s.ApiClient,  # noqa: F811
            namespace: str, via_processor: ViaProcessor) -> None:
        await _published(objs, kube, via_processor, namespace)
        url = f"{via_processor.url}/{namespace}/gpt/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
            calls = len((await http.get(f"{via_processor.model_url}/debug/requests")).json())
            await via_processor.processor.stop(0)
            refused = await http.post(url, json=chat(), headers={"Authorization": "Bearer sk-oai-alice-1"})
            assert refused.status_code == 500 and refused.json()["error"]["code"] == "payload_processor_error"
            assert len((await http.get(f"{via_processor.model_url}/debug/requests")).json()) == calls
        assert via_processor.front_sink.records == [] and via_processor.processor_sink.records == []
