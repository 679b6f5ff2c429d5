"""Limits every maasctl HTTP server applies before its application sees a request.

A client cannot make a server spend unbounded memory or hold a connection forever:
- at most `max_headers` header lines and `max_header_bytes` of header names and values (431 otherwise);
  the HTTP parser itself (llhttp) refuses header blocks above 80 KiB before that;
- while the request body is being read, each chunk must arrive within `body_read_timeout` seconds (408
  otherwise); once the body is complete, waiting on the connection (for a disconnect while a response
  streams) is not timed;
- at most `max_connections` concurrent connections and tasks per server (uvicorn `limit_concurrency`: 503
  above), idle keep-alive connections closed after `keep_alive_timeout` seconds.

Body size limits stay with each application (they differ: 64 KiB for maas-api, 10 MiB for a model request).
Known limit: uvicorn has no timeout for a client that sends its header block slowly; the connection cap bounds
how many such clients can be held open at once.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HttpGuard", "HttpLimits", "uvicorn_options"]


@dataclass(frozen=True)
class HttpLimits:
    max_headers: int = 100
    max_header_bytes: int = 32 * 1024
    body_read_timeout: float = 30.0
    max_connections: int = 1000
    keep_alive_timeout: float = 5.0


def uvicorn_options(limits: HttpLimits) -> dict[str, Any]:
    """The `uvicorn.Config` keyword arguments that carry `limits`."""
    return {"limit_concurrency": limits.max_connections, "timeout_keep_alive": limits.keep_alive_timeout}


async def _error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class HttpGuard:
    """ASGI middleware enforcing `HttpLimits` (see the module docstring)."""

    def __init__(self, app: ASGIApp, limits: HttpLimits | None = None) -> None:
        self.app = app
        self.limits = limits or HttpLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        headers = scope.get("headers") or []
        if len(headers) > limits.max_headers or sum(len(k) + len(v) for k, v in headers) > limits.max_header_bytes:
            await _error(send, 431, "headers_too_large", "too many or too large request headers")
            return
        body_done = False
        started = False
        timed_out = False

        async def timed_receive() -> Message:
            # A body that stalls reads as a client disconnect (every app already handles that); the guard
            # then answers 408 if the app had not started a response.
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout(limits.body_read_timeout):
                    message = await receive()
            except TimeoutError:
                timed_out = body_done = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, timed_receive, tracked_send)
        if timed_out and not started:
            await _error(send, 408, "request_timeout", "the request body did not arrive in time")
