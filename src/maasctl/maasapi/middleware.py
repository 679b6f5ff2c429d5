"""Pure ASGI middleware: identity headers refused, request body limit, access log and HTTP metrics.

The access log carries method, route template, status, duration and the caller's username when known —
never headers, bodies or query strings (those can carry keys or tokens)."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from maasctl.contract.edge import forbidden_client_header
from maasctl.maasapi.errors import error_body
from maasctl.maasapi.metrics import ApiMetrics

access_log = structlog.get_logger("maasctl.maasapi.access")


class BodyTooLarge(StarletteHTTPException):
    """Raised from `receive`; an HTTPException so FastAPI's body parsing passes it through unchanged."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


def _too_large_body(limit: int, path: str) -> bytes:
    return json.dumps(error_body("request_too_large", f"request body exceeds {limit} bytes", status=413,
                                 path=path)).encode()


class BodyLimitMiddleware:
    """Rejects bodies over `max_bytes` with 413, by Content-Length up front or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send: Send, path: str) -> None:
        body = _too_large_body(self.max_bytes, path)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.max_bytes + 1
                if declared > self.max_bytes:
                    await self._reject(send, str(scope.get("path", "")))
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send, str(scope.get("path", "")))


async def _send_json(send: Send, status: int, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


class IdentityHeaderMiddleware:
    """Refuses (403 `forbidden_header`, as the reference does) any request carrying a header only the gateway may decide
    (`contract.edge.server_decided`: `X-MaaS-Username`, `X-MaaS-Group`, `Impersonate-*`, ...), the same rule the
    gateway applies at the edge. maas-api never takes identity from headers; a client sending them is refused,
    not silently ignored, so a forged identity can never look like it worked (and nothing is minted)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = (name.decode("latin-1") for name, _ in scope.get("headers", []))
            forbidden = forbidden_client_header(names)
            if forbidden is not None:
                message = f"header {forbidden!r} is decided by the gateway and may not be sent"
                body = error_body("forbidden_header", message, status=403, path=str(scope.get("path", "")))
                await _send_json(send, 403, json.dumps(body).encode())
                return
        await self.app(scope, receive, send)


class AccessLogMiddleware:
    """Structured access log plus request count/latency/in-flight metrics by route template."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        self.metrics.in_flight.inc()

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            self.metrics.in_flight.dec()
            elapsed = time.perf_counter() - start
            route_obj: Any = scope.get("route")
            route = getattr(route_obj, "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            labels = (method, route, str(status))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(elapsed)
            state = scope.get("state") or {}
            access_log.info(
                "request",
                method=method,
                route=route,
                status=status,
                duration_ms=round(elapsed * 1000, 3),
                user=state.get("maasapi_user"),
            )
