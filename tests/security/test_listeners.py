"""The listeners and the credential parser, over real sockets against the real processes (the local stack's
gateway and maas-api, a console process in front of it, the payment-webhook receiver as the billing operator
starts it): the `Bearer` scheme in any case, request heads that trickle, trailing-slash redirects with a
foreign `Host`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import pytest
from e2e.conftest import World

from maasctl.billing.connector.payments import Payments
from maasctl.billing.connector.receiver import Receiver, Registry
from maasctl.console.localrun import start_console
from maasctl.httpguard import HttpLimits
from maasctl.tls import default_tls

from .test_edge import served_model

HEADER_TIMEOUT = HttpLimits().header_timeout


@asynccontextmanager
async def running_console(world: World) -> AsyncIterator[str]:
    """A console process next to the session's stack, for the test; its URL."""
    local = world.stack.local
    assert local is not None, "the listener tests run against the local stack"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        yield await start_console(local, port)
    finally:
        proc = local.processes.pop("console", None)
        if proc is not None:
            await asyncio.to_thread(proc.stop)


class _Clock:
    def now(self) -> datetime:
        return datetime.now(UTC)


async def webhook_receiver() -> Receiver:
    """The connector's receiver, started the way `maasctl billing run` starts it (no connector registered:
    only its listener is under test)."""
    receiver = Receiver(Registry(), cast(Payments, None), cast(Any, _Clock()), lambda _c, _t: None,
                        lambda _c, _a: None)
    await receiver.start("127.0.0.1:0")
    return receiver


# --- the Bearer scheme ------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR", "Bearer  "])
async def test_the_bearer_scheme_is_read_in_any_case_by_the_gateway_and_maas_api(world: World, scheme: str) -> None:
    key = await served_model(world)
    token = world.token("alice")
    for credential in (key, token):
        header = {"Authorization": f"{scheme} {credential}"}
        r = await world.chat("gpt", credential, headers=header)
        assert r.status_code == 200, (credential == key, r.status_code, r.text)
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        listed = await http.get("/v1/api-keys", headers={"Authorization": f"{scheme} {token}"})
        assert listed.status_code == 200, listed.text
        assert (await http.get("/v1/models", headers={"Authorization": f"{scheme} {key}"})).status_code == 200
        gateway_token = world.stack.gateway_token_file
        assert gateway_token is not None
        internal = await http.post("/internal/v1/api-keys/validate", json={"key": key},
                                   headers={"Authorization": f"{scheme} {gateway_token.read_text().strip()}"})
        assert internal.status_code == 200 and internal.json()["valid"] is True


async def test_what_is_not_one_bearer_token_is_no_credential_anywhere(world: World) -> None:
    key = await served_model(world)
    token = world.token("alice")
    for header in ("Bearer", f"Bearer {key} extra", f"Bearer {key}, Bearer {key}", f"Basic {key}",
                   f"Bearer{key}", f"Bearer\t{key}"):
        async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
            r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", headers={"Authorization": header},
                                json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code in (401, 403), (header, r.status_code, r.text)  # denied, never served
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
            mine = await http.get("/v1/api-keys", headers={"Authorization": header.replace(key, token)})
        assert mine.status_code == 401, (header, mine.text)


# --- request heads that trickle ---------------------------------------------------------------------------


async def _held(host: str, port: int, first: bytes, drip: bytes | None) -> tuple[float, bytes]:
    """Open a connection, send `first`, then `drip` once a second (None: nothing more) until the server closes
    it; returns (seconds until closed, what the server sent). Fails if the server holds it for three bounds."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.monotonic()
    received = bytearray()

    async def read_all() -> None:
        while chunk := await reader.read(65536):
            received.extend(chunk)

    readall = asyncio.create_task(read_all())
    try:
        async with asyncio.timeout(3 * HEADER_TIMEOUT):
            if first:
                writer.write(first)
            while not readall.done():
                if drip is not None:
                    try:
                        writer.write(drip)
                        await writer.drain()
                    except ConnectionError:
                        break
                await asyncio.wait([readall], timeout=1.0)
            await readall
    except ConnectionError:
        pass
    finally:
        readall.cancel()
        writer.close()
    return time.monotonic() - started, bytes(received)


def variants(health: str) -> dict[str, tuple[bytes, bytes | None]]:
    """What a slow client sends first, then once a second (`health`: a path the listener answers 200)."""
    head = f"GET {health} HTTP/1.1\r\nHost: x\r\n".encode()
    return {
        "silent": (b"", None),
        "stalled after one header": (head, None),
        "a header byte a second": (head + b"X-Slow: ", b"a"),
        "a header line a second": (head, b"X-Slow: a\r\n"),
        "a second request trickled on a kept-alive connection": (head + b"\r\n" + head, b"X-Slow: a\r\n"),
    }


async def test_a_request_head_that_trickles_is_cut_off_on_every_public_listener(world: World) -> None:
    receiver = await webhook_receiver()
    try:
        async with running_console(world) as console:
            results, checks = await _trickle_everywhere(world, console, receiver)
    finally:
        await receiver.stop()
    for (name, variant, _), (seconds, answer) in zip(checks, results, strict=True):
        assert seconds <= HEADER_TIMEOUT + 5, (name, variant, seconds)
        if variant.startswith("a second request"):
            assert answer.startswith(b"HTTP/1.1 200"), (name, variant, answer[:80])  # the first one was served
        if name != "payment-webhook receiver" and variant != "silent":
            assert b"HTTP/1.1 408" in answer, (name, variant, answer[-200:])


Check = tuple[str, str, Awaitable[tuple[float, bytes]]]


async def _trickle_everywhere(world: World, console: str,
                              receiver: Receiver) -> tuple[list[tuple[float, bytes]], list[Check]]:
    """Hold slow connections (every variant, five of each) on each listener at once, check each still serves
    a normal request meanwhile; what each slow connection saw, in the order of the checks."""
    listeners = {  # name: (base URL, a path it answers 200)
        "gateway": (world.stack.gateway_url, "/_gateway/healthz"),
        "maas-api": (world.stack.api_url, "/health"),
        "console": (console, "/healthz"),
        "payment-webhook receiver": (f"http://127.0.0.1:{receiver.port}", "/healthz"),
    }
    checks: list[Check] = []
    for name, (url, health) in listeners.items():
        host, port = url.removeprefix("http://").split(":")
        for variant, (first, drip) in variants(health).items():
            for _ in range(5):  # many at once: each is bounded on its own
                checks.append((name, variant, _held(host, int(port), first, drip)))
    held = asyncio.gather(*(c for _, _, c in checks))
    await asyncio.sleep(1)
    for name, (url, health) in listeners.items():  # served meanwhile
        async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
            r = await http.get(url + health)
        assert r.status_code == 200, (name, r.status_code)
    return list(await held), checks


# --- trailing-slash redirects -----------------------------------------------------------------------------


REDIRECTS = {  # path asked for: the Location answered
    "maas-api": [("/v1/api-keys/", "/v1/api-keys"), ("/v1/models/?x=1", "/v1/models?x=1"), ("/health/", "/health")],
    "console": [("/signin/", "/signin"), ("/static", "/static/"), ("/signin/?next=%2Fkeys", "/signin?next=%2Fkeys")],
}


@pytest.mark.parametrize("where", sorted(REDIRECTS))
async def test_trailing_slash_redirects_never_name_the_host_the_client_sent(world: World, where: str) -> None:
    async with contextlib.AsyncExitStack() as stack:
        base = world.stack.api_url if where == "maas-api" else await stack.enter_async_context(running_console(world))
        for path, location in REDIRECTS[where]:
            for host in ("evil.example", "evil.example:443", "127.0.0.1"):
                async with httpx.AsyncClient(base_url=base, timeout=30, follow_redirects=False,
                                             verify=default_tls()) as http:
                    r = await http.get(path, headers={"Host": host, "X-Forwarded-Host": "evil.example"})
                assert r.status_code in (307, 308), (where, path, r.status_code, r.text)
                assert r.headers["location"] == location, (where, path, host)
