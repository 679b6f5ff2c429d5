"""`maasctl payload-processor`: the processor process - informers, counters, usage sink, the gRPC server, and
HTTP health and metrics.

The provider relay (`payload.relay`, `--relay-port`) serves models with several providers on its own HTTP port.

Its data plane is a `gateway.server.Gateway` used as the pipeline's `Plane` only (never served over HTTP): the
same informers (HTTPRoutes, policies, upstream-key Secrets), the counter store (Redis shared with Limitador's
side, or in process), the usage sink with its spool (a killed processor loses no billing) and the guardrails
client the local gateway has - one construction of each for both processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from maasctl.eventloop import tune_gc
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.server import Gateway, start_http
from maasctl.gateway.state import WATCHED
from maasctl.payload.adapter import ProcessorStages
from maasctl.payload.relay import ProviderRelay
from maasctl.payload.server import start_processor
from maasctl.runtime import Client
from maasctl.runtime.connect import connect

__all__ = ["HealthApp", "run_processor", "serve_processor"]

log = logging.getLogger("maasctl.payload")


class HealthApp:
    """`/healthz` (the process runs), `/readyz` (informers synced: 503 until then) and `/metrics`."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        self.ready = ready

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/healthz":
            status, body, kind = 200, b'{"status":"ok"}', "application/json"
        elif path == "/readyz":
            synced = self.ready()
            status, body, kind = (200 if synced else 503), json.dumps({"synced": synced}).encode(), "application/json"
        elif path == "/metrics":
            status, body, kind = 200, generate_latest(), CONTENT_TYPE_LATEST
        else:
            status, body, kind = 404, b'{"error":"not found"}', "application/json"
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


async def serve_processor(settings: GatewaySettings, metrics_port: int, stop: asyncio.Event,
                          started: Callable[[int, str], None] | None = None) -> None:
    """Serve the processor on `settings.host:settings.port` (gRPC) and `metrics_port` (HTTP) until `stop`."""
    api = await connect(settings.kubeconfig)
    plane = Gateway(settings, Client(api))

    def ready() -> bool:
        return all(plane.cache.informer(g).has_synced for g in WATCHED)

    http = await start_http(HealthApp(ready), settings.host, metrics_port, settings.log_level)
    relay = None
    grpc_server = None
    try:
        if settings.relay_port is not None:  # models with several providers are routed here (payload.relay)
            relay = await start_http(ProviderRelay(plane), settings.host, settings.relay_port, settings.log_level)
        await plane.start()
        tune_gc()
        grpc_server = await start_processor(ProcessorStages(plane.pipeline), host=settings.host, port=settings.port,
                                            max_request_bytes=settings.max_request_bytes, ready=ready)
        log.info("payload processor for %s/%s: gRPC on %s:%d, health and metrics on %s, provider relay on %s",
                 settings.gateway_namespace, settings.gateway_name, settings.host, grpc_server.port, http.url,
                 relay.url if relay is not None else "none")
        if started is not None:
            started(grpc_server.port, http.url)
        await stop.wait()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(5)
        if relay is not None:
            await relay.stop()
        await http.stop()
        await plane.stop()
        await api.close()


async def run_processor(settings: GatewaySettings, metrics_port: int, stop: asyncio.Event | None = None) -> int:
    """`maasctl payload-processor`: serve until SIGINT/SIGTERM."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await serve_processor(settings, metrics_port, stop)
    return 0
