"""Health (gRPC health service, HTTP /healthz /readyz) and metrics of the processor; no secret in either, nor in
its logs."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import generate_latest

from maasctl.payload.app import HealthApp
from maasctl.payload.envoy import ProcessorFailure, channel, open_filter
from maasctl.payload.modes import POST
from maasctl.payload.server import SERVICE, start_processor

from .conftest import PROVIDER_KEY, Running, StagesUnderTest, chat, request_headers


async def _check(ch: grpc.aio.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(ch)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return int(reply.status)


class TestGrpcHealth:
    """NOT_SERVING until the informers synced, then SERVING, for the server and the ext_proc service."""

    @pytest.mark.parametrize("service", ["", SERVICE])
    async def test_ready_flips(self, service: str) -> None:
        server = await start_processor(StagesUnderTest(), ready=lambda: False)
        ch = channel(f"127.0.0.1:{server.port}")
        try:
            assert await _check(ch, service) == health_pb2.HealthCheckResponse.NOT_SERVING
            await server.set_ready(True)
            assert await _check(ch, service) == health_pb2.HealthCheckResponse.SERVING
        finally:
            await ch.close()
            await server.stop(0)


async def _get(app: HealthApp, path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path}, None, send)
    return sent[0]["status"], sent[1]["body"]


class TestHttpHealth:
    @pytest.mark.parametrize(("synced", "status"), [(False, 503), (True, 200)])
    async def test_readyz(self, synced: bool, status: int) -> None:
        assert (await _get(HealthApp(lambda: synced), "/readyz"))[0] == status
        assert (await _get(HealthApp(lambda: synced), "/healthz"))[0] == 200

    async def test_metrics_and_unknown_path(self) -> None:
        status, body = await _get(HealthApp(lambda: True), "/metrics")
        assert status == 200 and b"maas_payload_streams_total" in body
        assert (await _get(HealthApp(lambda: True), "/other"))[0] == 404


def _sample(name: str, labels: dict[str, str]) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


class TestMetrics:
    """Streams, messages by type, refusals by code and errors by kind are counted."""

    async def test_counted(self, processor: Running) -> None:
        before = {
            "streams": _sample("maas_payload_streams_total", {"stage": "post"}),
            "headers": _sample("maas_payload_messages_total", {"stage": "post", "type": "request_headers"}),
            "refused": _sample("maas_payload_refusals_total", {"stage": "post", "code": "unentitled"}),
            "protocol": _sample("maas_payload_errors_total", {"stage": "post", "kind": "protocol"}),
        }
        f = open_filter(processor.channel, POST)
        await f.request(request_headers(), chat("refused-model"))
        await f.aclose()
        f = open_filter(processor.channel, POST)
        await f.request(request_headers(), chat("other"))
        with pytest.raises(ProcessorFailure):
            await f.request(request_headers(), chat("other"))  # request_headers twice: misuse
        await f.aclose()
        assert _sample("maas_payload_streams_total", {"stage": "post"}) - before["streams"] == 2
        assert _sample("maas_payload_messages_total",
                       {"stage": "post", "type": "request_headers"}) - before["headers"] == 3
        assert _sample("maas_payload_refusals_total",
                       {"stage": "post", "code": "unentitled"}) - before["refused"] == 1
        assert _sample("maas_payload_errors_total", {"stage": "post", "kind": "protocol"}) - before["protocol"] == 1


class TestNoSecrets:
    """The caller's key, the provider key and the identity never reach a log line or a metric."""

    async def test_logs_and_metrics(self, processor: Running, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.DEBUG)
        for misuse in (False, True):
            f = open_filter(processor.channel, POST)
            out = await f.request(request_headers(), chat("other"))
            assert ("authorization", f"Bearer {PROVIDER_KEY}") in out.headers
            if misuse:
                with pytest.raises(ProcessorFailure):
                    await f.request(request_headers(), chat("other"))
            await f.aclose()
        text = caplog.text + generate_latest().decode()
        for secret in (PROVIDER_KEY, "caller-key", "eyJ1c2VyaWQiOiJhbGljZSJ9"):
            assert secret not in text
