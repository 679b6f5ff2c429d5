"""`httpguard` on a real uvicorn socket with a short head bound (the full listeners are covered over HTTP in
tests/security/test_listeners.py): what the head timer cuts and what it must never cut (a slow app, a slow
body within its own bound, pipelined requests), and path-only trailing-slash redirects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from maasctl.gateway.server import start_http
from maasctl.httpguard import HttpLimits, relative_slash_redirects

LIMITS = HttpLimits(header_timeout=1.0)


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["path"] == "/slow":
        await asyncio.sleep(2.5)  # the app may take longer than the head bound
    answer = b"ok:" + str(len(body)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """`_app` served the way the gateway serves (`start_http`: HttpGuard and `uvicorn_options`)."""
    http = await start_http(_app, limits=LIMITS)
    try:
        yield int(http.url.rsplit(":", 1)[1])
    finally:
        await http.stop()


async def _exchange(port: int, chunks: list[tuple[float, bytes]]) -> bytes:
    """Send each chunk after its delay; return everything the server sent until it closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for delay, chunk in chunks:
        await asyncio.sleep(delay)
        writer.write(chunk)
        await writer.drain()
    async with asyncio.timeout(10):
        data = await reader.read(-1)
    writer.close()
    return data


REQUEST = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"


async def test_a_head_that_does_not_finish_in_time_gets_408_and_is_closed(port: int) -> None:
    for chunks in ([(0, b"GET /x HTTP/1.1\r\nHost: a\r\n")],
                   [(0, b"G"), (0.6, b"ET /x HT"), (0.6, b"TP/1.1\r\n")],
                   [(0, REQUEST), (0.2, b"GET /x HTTP/1.1\r\n"), (0.5, b"X-A: b\r\n"), (0.5, b"X-B: c\r\n")]):
        data = await _exchange(port, chunks)
        assert data.count(b"HTTP/1.1 408 Request Timeout") == 1, data
        assert data.count(b"HTTP/1.1 200") == sum(c == REQUEST for _, c in chunks)
    assert await _exchange(port, [(0, b"")]) == b""  # nothing sent: closed without an answer
    assert await _exchange(port, [(0, b"\r\n"), (0.6, b"\r\n"), (0.6, b"\r\n")]) == b""


async def test_what_the_head_timer_never_cuts(port: int) -> None:
    close = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    assert (await _exchange(port, [(0, b"GET /slow HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")])
            ).endswith(b"ok:0")  # the app's own time is not the head's
    body = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nConnection: close\r\n\r\n"
    assert (await _exchange(port, [(0, body), (0.7, b"ab"), (0.7, b"cd")])).endswith(b"ok:4")  # body: own bound
    # Pipelined: the second head is complete while the slow first is served; it is answered, not cut.
    pipelined = b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" + close
    data = await _exchange(port, [(0, pipelined)])
    assert data.count(b"HTTP/1.1 200") == 2 and b"408" not in data
    # Kept alive: each request gets the whole bound again from the previous answer.
    data = await _exchange(port, [(0, REQUEST), (0.7, REQUEST), (0.7, REQUEST), (0.7, close)])
    assert data.count(b"HTTP/1.1 200") == 4 and b"408" not in data


def _redirecting_app() -> Starlette:
    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.url.path)

    app = Starlette(routes=[Route("/items", page), Route("/dir/", page), Route("/evil.example/x", page)])
    relative_slash_redirects(app.router)
    return app


@pytest.mark.parametrize(("target", "location"), [
    ("/items/", "/items"), ("/dir", "/dir/"), ("/items/?a=1&b=%2F", "/items?a=1&b=%2F"),
    ("//evil.example/x/", "/evil.example/x"),  # never `//host`: a scheme-relative URL to another site
])
async def test_slash_redirects_are_paths_whatever_the_host(target: str, location: str) -> None:
    path, _, query = target.partition("?")
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
             "headers": [(b"host", b"evil.example")], "scheme": "http", "server": ("127.0.0.1", 80),
             "root_path": "", "http_version": "1.1", "asgi": {"version": "3.0"}}
    await _redirecting_app()(scope, receive, send)  # the ASGI scope as a server builds it (no client rewriting)
    assert sent[0]["status"] == 307
    assert dict(sent[0]["headers"])[b"location"].decode() == location


async def test_paths_no_route_matches_either_way_are_not_redirected() -> None:
    transport = httpx.ASGITransport(app=_redirecting_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://evil.example") as http:
        for target in ("/nothing/", "/", "/nothing"):
            assert (await http.get(target)).status_code == 404, target
