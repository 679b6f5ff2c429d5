"""The gRPC side of the payload processor: `envoy.service.ext_proc.v3.ExternalProcessor` plus gRPC health.

Each `Process` stream is one HTTP request through one filter (`x-maas-stage` says which). The handler reads
and writes through the context (not an async generator), so a stream Envoy cancels cancels this coroutine
where it waits and the exchange is settled right there, shielded from that cancellation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from maasctl.gateway.pool import WORKER_REQUESTS
from maasctl.payload.metrics import ERRORS, IN_FLIGHT, MESSAGES, REFUSALS, STREAMS
from maasctl.payload.modes import stage_from_protocol, stage_of
from maasctl.payload.stages import Pipeline
from maasctl.payload.stream import ProtocolError, StreamMachine

__all__ = ["SERVICE", "ExtProcService", "ProcessorServer", "start_processor"]

log = logging.getLogger("maasctl.payload")

SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


class ExtProcService(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Runs the pipeline's stages for each stream; errors end the stream with a gRPC status (Envoy: 500)."""

    def __init__(self, pipeline: Pipeline, max_request_bytes: int, taken: Any = None) -> None:
        self.pipeline = pipeline
        self.max_request_bytes = max_request_bytes
        self.taken = taken if taken is not None else WORKER_REQUESTS.labels("0")

    async def Process(self, requests: Any, context: Any) -> None:
        self.taken.inc()
        modes = stage_of(context.invocation_metadata())
        first = None
        if modes is None:  # Envoy Gateway sends no initial metadata: the first message's protocol_config tells
            first = await anext(aiter(requests), None)
            modes = stage_from_protocol(first)
        if modes is None:
            ERRORS.labels("unknown", "stage").inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "x-maas-stage must be pre or post (or the first message must carry protocol_config)")
            return
        stage = modes.stage
        machine = StreamMachine(self.pipeline, modes, self.max_request_bytes)
        STREAMS.labels(stage).inc()
        IN_FLIGHT.labels(stage).inc()
        failed = False
        try:
            async for request in _prepend(first, requests):
                MESSAGES.labels(stage, request.WhichOneof("request") or "none").inc()
                try:
                    reply = await machine.handle(request)
                except ProtocolError as e:
                    failed = True
                    ERRORS.labels(stage, "protocol").inc()
                    log.warning("ext_proc %s stream: %s", stage, e)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                except Exception:
                    failed = True
                    ERRORS.labels(stage, "stage").inc()
                    log.exception("ext_proc %s stream: a stage failed", stage)
                    await context.abort(grpc.StatusCode.INTERNAL, "a processing stage failed")
                if machine.refused is not None and machine.done:
                    REFUSALS.labels(stage, machine.refused.code).inc()
                await context.write(reply)
        finally:
            if machine.dropped_tail:
                ERRORS.labels(stage, "tail_after_trailers").inc()
            if not machine.done and not failed:
                ERRORS.labels(stage, "closed_early").inc()
            await asyncio.shield(machine.close(error=failed))
            IN_FLIGHT.labels(stage).dec()


async def _prepend(first: Any, rest: Any) -> AsyncIterator[Any]:
    """`first` (already read to tell the stage, or None) followed by the rest of the stream."""
    if first is not None:
        yield first
    async for item in rest:
        yield item


@dataclass
class ProcessorServer:
    """A started gRPC server; `port` is the bound one (0 asked: a free port)."""

    server: Any
    health: Any
    port: int

    async def set_ready(self, ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE):
            await self.health.set(name, status)

    async def stop(self, grace: float | None = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_processor(pipeline: Pipeline, *, host: str = "127.0.0.1", port: int = 0,
                          max_request_bytes: int = 10 * 1024 * 1024,
                          ready: Callable[[], bool] | None = None, taken: Any = None) -> ProcessorServer:
    """Serve the processor on `host:port` in the running loop (health NOT_SERVING until `set_ready`, unless
    `ready` is None: then serving at once). grpcio binds with SO_REUSEPORT (its default), which is how every
    worker of a pool (`gateway.workers`) serves the same port; `taken` counts this worker's streams."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_request_bytes + 1024 * 1024),
                                      ("grpc.max_send_message_length", max_request_bytes + 1024 * 1024)])
    pb_grpc.add_ExternalProcessorServicer_to_server(ExtProcService(pipeline, max_request_bytes, taken), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    started = ProcessorServer(server, health, bound)
    await started.set_ready(ready() if ready is not None else True)
    return started
