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

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from maasctl.eventloop import tune_gc
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.pool import Worker, metrics_registry
from maasctl.gateway.server import Gateway, start_http
from maasctl.gateway.state import WATCHED
from maasctl.gateway.workers import WorkerPool
from maasctl.payload.adapter import ProcessorStages
from maasctl.payload.relay import ProviderRelay
from maasctl.payload.server import start_processor
from maasctl.runtime import Client
from maasctl.runtime.connect import connect

__all__ = ["HealthApp", "run_processor", "serve_processor"]

log = logging.getLogger("maasctl.payload")


class HealthApp:
    """`/healthz` (the process runs), `/readyz` (informers synced, or in a pool every worker ready: 503 until
    then) and `/metrics` (this process's registry, or in a pool the sum over its workers)."""

    def __init__(self, ready: Callable[[], bool], registry: CollectorRegistry = REGISTRY) -> None:
        self.ready = ready
        self.registry = registry

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
            status, body, kind = 200, generate_latest(self.registry), CONTENT_TYPE_LATEST
        else:
            status, body, kind = 404, b'{"error":"not found"}', "application/json"
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


async def serve_processor(settings: GatewaySettings, metrics_port: int, stop: asyncio.Event,
                          started: Callable[[int, str], None] | None = None, worker: Worker | None = None) -> None:
    """Serve the processor on `settings.host:settings.port` (gRPC) and `metrics_port` (HTTP) until `stop`. As
    `worker` of a pool: the gRPC port and the relay's are shared with the other workers, and the health and
    metrics port is the parent's."""
    api = await connect(settings.kubeconfig)
    plane = Gateway(settings, Client(api), worker=worker)

    def ready() -> bool:
        return all(plane.cache.informer(g).has_synced for g in WATCHED)

    http = await start_http(HealthApp(ready), settings.host, metrics_port, settings.log_level) if worker is None \
        else None
    relay = None
    grpc_server = None
    try:
        if settings.relay_port is not None:  # models with several providers are routed here (payload.relay)
            relay = await start_http(ProviderRelay(plane, plane.taken), settings.host, settings.relay_port,
                                     settings.log_level, reuse_port=worker is not None)
        await plane.start()
        tune_gc()
        grpc_server = await start_processor(ProcessorStages(plane.pipeline), host=settings.host, port=settings.port,
                                            max_request_bytes=settings.max_request_bytes, ready=ready,
                                            taken=plane.taken)
        log.info("payload processor for %s/%s: gRPC on %s:%d, health and metrics on %s, provider relay on %s%s",
                 settings.gateway_namespace, settings.gateway_name, settings.host, grpc_server.port,
                 http.url if http is not None else "the parent's", relay.url if relay is not None else "none",
                 f" (worker {worker.index})" if worker is not None else "")
        if started is not None:
            started(grpc_server.port, http.url if http is not None else "")
        if worker is not None:
            worker.set_ready(True)
        await stop.wait()
    finally:
        if worker is not None:
            worker.set_ready(False)  # draining: the pool is not ready any more
        if grpc_server is not None:
            await grpc_server.stop(5)
        if relay is not None:
            await relay.stop()
        if http is not None:
            await http.stop()
        await plane.stop()
        await api.close()


async def run_processor(settings: GatewaySettings, metrics_port: int, stop: asyncio.Event | None = None,
                        worker: Worker | None = None) -> int:
    """`maasctl payload-processor`: serve until SIGINT/SIGTERM. With `settings.workers` > 1 this process is the
    parent of that many workers (`gateway.workers`) and serves the health and metrics port itself."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if settings.workers > 1 and worker is None:
        pool = WorkerPool(settings, _processor_worker, ports=("port", "relay_port"))
        bound = pool.start()
        http = await start_http(HealthApp(pool.state.ready, metrics_registry(pool.state, pool.metrics_dir)),
                                settings.host, metrics_port, settings.log_level)
        log.info("payload processor for %s/%s: %d worker processes, gRPC on %s:%d, health and metrics on %s",
                 settings.gateway_namespace, settings.gateway_name, settings.workers, bound.host, bound.port, http.url)
        try:
            return await pool.run(stop)
        finally:
            await http.stop()
    await serve_processor(settings, metrics_port, stop, worker=worker)
    return 0


async def _processor_worker(settings: GatewaySettings, worker: Worker) -> int:
    """A worker of the processor's pool (spawned by `WorkerPool`; health and metrics are the parent's)."""
    return await run_processor(settings, 0, worker=worker)
