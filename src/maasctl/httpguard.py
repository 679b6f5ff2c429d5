"""Limits every maasctl HTTP server applies before its application sees a request.

A client cannot make a server spend unbounded memory or hold a connection forever:
- at most `max_headers` header lines and `max_header_bytes` of header names and values (431 otherwise);
  the HTTP parser itself (llhttp) refuses header blocks above 80 KiB before that;
- while the request body is being read, each chunk must arrive within `body_read_timeout` seconds (408
  otherwise); once the body is complete, waiting on the connection (for a disconnect while a response
  streams) is not timed;
- at most `max_connections` concurrent connections and tasks per server (uvicorn `limit_concurrency`: 503
  above), idle keep-alive connections closed after `keep_alive_timeout` seconds;
- the request head (request line and headers) must be complete within `header_timeout` seconds of the
  connection opening or of the previous response on it, however the bytes trickle in; otherwise the
  connection is closed (with a 408 when part of a request had arrived). uvicorn has no such timeout, so
  `uvicorn_options` runs its httptools protocol with one added; aiohttp servers (the payment-webhook receiver)
  get it from `aiohttp_runner_options` (their keep-alive timer, which a trickled head does not reset);
- a trailing-slash redirect (`relative_slash_redirects`) is a path-only `Location`: Starlette's own builds
  an absolute URL from the request's `Host` header, which the client chooses.

Body size limits stay with each application (they differ: 64 KiB for maas-api, 10 MiB for a model request).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Final

from starlette.datastructures import URL
from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HttpGuard", "HttpLimits", "aiohttp_runner_options", "relative_slash_redirects", "start_aiohttp",
           "uvicorn_options"]


@dataclass(frozen=True)
class HttpLimits:
    max_headers: int = 100
    max_header_bytes: int = 32 * 1024
    body_read_timeout: float = 30.0
    max_connections: int = 1000
    keep_alive_timeout: float = 5.0
    header_timeout: float = 10.0


def uvicorn_options(limits: HttpLimits) -> dict[str, Any]:
    """The `uvicorn.Config` keyword arguments that carry `limits`."""
    return {"limit_concurrency": limits.max_connections, "timeout_keep_alive": limits.keep_alive_timeout,
            "http": _head_timeout_protocol(limits.header_timeout)}


def aiohttp_runner_options(limits: HttpLimits) -> dict[str, Any]:
    """The `aiohttp.web.AppRunner` keyword arguments that carry `limits`: aiohttp arms its keep-alive timer
    when a connection opens and after each response, and closes the connection when it fires while no request
    head has been parsed, so it bounds the head's time as uvicorn's added timer does."""
    return {"keepalive_timeout": limits.header_timeout}


async def start_aiohttp(app: Any, bind: str, limits: HttpLimits | None = None) -> tuple[Any, int]:
    """Serve an `aiohttp.web.Application` on `host:port` (port 0: a free one) with `limits`; the runner (stop it
    with `cleanup()`) and the port it listens on."""
    from aiohttp import web

    host, _, port = bind.rpartition(":")
    runner = web.AppRunner(app, access_log=None, **aiohttp_runner_options(limits or HttpLimits()))
    await runner.setup()
    site = web.TCPSite(runner, host or None, int(port or 0))
    await site.start()
    sockets = getattr(site._server, "sockets", None) or ()
    return runner, int(sockets[0].getsockname()[1]) if sockets else int(port or 0)


_HEAD_TIMEOUT_BODY: Final = json.dumps({"error": {
    "message": "the request headers did not arrive in time", "type": "invalid_request_error",
    "code": "request_timeout"}}).encode()
_HEAD_TIMEOUT_RESPONSE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_HEAD_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _HEAD_TIMEOUT_BODY
)


def _head_timeout_protocol(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a timer on the request head (see the module docstring)."""

    class HeadTimeoutProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None
            self._heads = 0  # request heads parsed on this connection
            self._answered = 0  # responses completed on it
            self._head_begun = False  # a request has begun whose head is not complete

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            if self._head_begun:
                self.transport.write(_HEAD_TIMEOUT_RESPONSE)
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_begun = True

        def on_headers_complete(self) -> None:
            self._cancel_head_timer()
            self._heads += 1
            self._head_begun = False
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            self._answered += 1
            super().on_response_complete()
            # The next head is timed only once every parsed request is answered (a pipelined one that is
            # already parsed waits for its turn, untimed).
            if self._heads == self._answered and not self.transport.is_closing():
                self._arm_head_timer()

    return HeadTimeoutProtocol


def relative_slash_redirects(router: Router) -> None:
    """Answer a path that matches a route only with its trailing slash added or removed by a redirect whose
    `Location` is the path (and query) alone, instead of Starlette's absolute URL built from `Host`. A path
    that would start with `//` (a scheme-relative URL to another host) is never produced."""
    router.redirect_slashes = False
    fallback = router.default

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if scope["type"] == "http" and path != "/":
            other = path.rstrip("/") if path.endswith("/") else path + "/"
            other = "/" + other.lstrip("/")
            candidate = {**scope, "path": other}
            if other != path and any(route.matches(candidate)[0] is not Match.NONE for route in router.routes):
                query = scope.get("query_string", b"").decode("latin-1")
                location = str(URL(path=other, query=query))
                await RedirectResponse(location)(scope, receive, send)
                return
        await fallback(scope, receive, send)

    router.default = default


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
