"""The processor's protocol tests: a real gRPC server on a loopback port and a small pipeline collaborator.

`StagesUnderTest` is not a fake of a server: it is the processor's collaborator (the push-style pipeline API),
with stages simple enough that each test can tell from the bytes which stage ran and what it was handed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from maasctl.payload.envoy import channel
from maasctl.payload.server import ProcessorServer, start_processor
from maasctl.payload.stages import Headers, Termination

LIMIT = 4096
PROVIDER_KEY = "sk-provider-secret"


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    headers: Mapping[str, str]
    body: bytes


def refusal(status: int, code: str) -> Refusal:
    return Refusal(status, code, {"Content-Type": "application/json"},
                   json.dumps({"error": {"code": code}}).encode())


@dataclass
class Ex:
    method: str
    path: bytes
    query: str
    headers: list[tuple[str, str]]
    scheme: str
    roles: list[str] = field(default_factory=list)
    body: bytes = b""
    upstream_headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Upstream:
    headers: Headers
    body: bytes


class Response:
    """Adds a header, drops `data: usage` chunks (as the stream-usage stage does), appends a tail on close."""

    whole = False  # no output stage here replaces the head
    termination = "complete"

    def __init__(self, status: int, headers: Headers) -> None:
        self.status = status
        self.headers = [(k, v) for k, v in headers if k != "content-length"] + [("x-processed", "post")]
        self.chunks: list[bytes] = []

    async def feed(self, chunk: bytes) -> bytes:
        self.chunks.append(chunk)
        return b"" if chunk.startswith(b"data: usage") else chunk.replace(b"internal-model", b"public-model")

    async def close(self) -> bytes:
        return b"data: [DONE]\n\n" if self.chunks else b""


class Guarded(Response):
    """Output rails that read the answer whole (`whole`): held until the end, then passed, or replaced by a 400
    refusal with its own head when the answer holds `FORBIDDEN` (as `gateway.guardrails.OutputGuard` does)."""

    whole = True
    refusal = json.dumps({"error": {"code": "guardrail_blocked"}}).encode()

    async def feed(self, chunk: bytes) -> bytes:
        self.chunks.append(chunk)
        return b""

    async def close(self) -> bytes:
        answer = b"".join(self.chunks)
        if b"FORBIDDEN" not in answer:
            return answer
        self.status = 400
        self.headers = [("content-type", "application/json"), ("content-length", str(len(self.refusal))),
                        ("x-maas-guardrail", "safety/self check output")]
        return self.refusal


class StagesUnderTest:
    """pre: refuse `x-refuse`, copy the body's `model` into `x-gateway-model-name`. post: swap the caller's
    credential for the provider key, drop `x-maas-identity`, rename the model; bodies over LIMIT get 413."""

    def __init__(self) -> None:
        self.finished: list[tuple[Ex, int, Termination]] = []
        self.finish_event = asyncio.Event()
        self.exchanges: list[Ex] = []
        self.exchange_event = asyncio.Event()
        self.hold: asyncio.Event | None = None  # when set, request_body waits on it (a slow stage)

    def exchange(self, method: str, raw_path: bytes, query: str, headers: Headers, scheme: str) -> Ex:
        ex = Ex(method, raw_path, query, list(headers), scheme)
        ex.upstream_headers = list(headers)
        self.exchanges.append(ex)
        self.exchange_event.set()
        return ex

    async def request_head(self, ex: Ex, role: str) -> Refusal | None:
        ex.roles.append(role)
        if any(k == "x-refuse" for k, _ in ex.headers):
            return refusal(400, "forbidden_header")
        return None

    async def request_body(self, ex: Ex, body: bytes, role: str) -> Refusal | None:
        if self.hold is not None:
            await self.hold.wait()
        if len(body) > LIMIT:
            return refusal(413, "request_too_large")
        ex.body = body
        model = json.loads(body).get("model") if body else None
        if model == "refused-model":
            return refusal(403, "unentitled")
        if role == "pre" and model:
            ex.upstream_headers.append(("x-gateway-model-name", model))
        if role == "post":
            drop = {"authorization", "x-api-key", "x-maas-identity"}
            ex.upstream_headers = [(k, v) for k, v in ex.upstream_headers if k not in drop]
            ex.upstream_headers.append(("authorization", f"Bearer {PROVIDER_KEY}"))
            if model == "public-model":
                ex.body = body.replace(b"public-model", b"internal-model")
        return None

    def upstream_request(self, ex: Ex) -> Upstream:
        return Upstream(ex.upstream_headers, ex.body)

    def response(self, ex: Ex, status: int, headers: Headers) -> Response:
        return Guarded(status, headers) if b"guarded-model" in ex.body else Response(status, headers)

    async def finish(self, ex: Ex, status: int, termination: Termination) -> None:
        self.finished.append((ex, status, termination))
        self.finish_event.set()

    async def settled(self, count: int = 1) -> list[tuple[Ex, int, Termination]]:
        """Wait until `count` exchanges were finished (the processor settles a cancelled stream on its own)."""
        await _until(lambda: len(self.finished) >= count, self.finish_event)
        return self.finished

    async def opened(self, count: int) -> None:
        """Wait until `count` exchanges were opened."""
        await _until(lambda: len(self.exchanges) >= count, self.exchange_event)


async def _until(done: Callable[[], bool], event: asyncio.Event) -> None:
    async def wait() -> None:
        while not done():
            event.clear()
            await event.wait()
    await asyncio.wait_for(wait(), 10)


@dataclass
class Running:
    stages: StagesUnderTest
    server: ProcessorServer
    channel: grpc.aio.Channel

    @property
    def target(self) -> str:
        return f"grpc://127.0.0.1:{self.server.port}"


@pytest.fixture
async def processor() -> AsyncIterator[Running]:
    stages = StagesUnderTest()
    server = await start_processor(stages, port=0, max_request_bytes=LIMIT)
    ch = channel(f"127.0.0.1:{server.port}")
    try:
        yield Running(stages, server, ch)
    finally:
        await ch.close()
        await server.stop(0)


def request_headers(path: str = "/v1/chat/completions", method: str = "POST",
                    extra: Headers = ()) -> list[tuple[str, str]]:
    return [(":method", method), (":path", path), (":scheme", "https"), (":authority", "gw.example"),
            ("content-type", "application/json"), ("authorization", "Bearer caller-key"),
            ("x-maas-identity", "eyJ1c2VyaWQiOiJhbGljZSJ9"), *extra]


def chat(model: str = "public-model", **extra: Any) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}).encode()
