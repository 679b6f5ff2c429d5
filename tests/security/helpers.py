"""What the security tests read back: the backend's request log (did anything reach the model?)."""

from __future__ import annotations

from typing import Any

import httpx
from e2e.conftest import World

from maasctl.tls import default_tls


async def backend_log(world: World) -> list[dict[str, Any]]:
    """The test model's last requests, oldest first (it keeps the last few hundred of a stack every suite shares)."""
    async with httpx.AsyncClient(base_url=world.stack.model_url, timeout=10, verify=default_tls()) as http:
        seen: list[dict[str, Any]] = (await http.get("/debug/requests")).json()
    return seen


async def backend_seq(world: World) -> int:
    """How many requests the test model has received: compare two of these, never two lengths of its log (a full
    log stays the same length whatever reaches the model)."""
    log = await backend_log(world)
    return int(log[-1]["seq"]) if log else 0


async def backend_since(world: World, seq: int) -> list[dict[str, Any]]:
    """The requests the test model received after `backend_seq` answered `seq`, all of them (or the test fails)."""
    log = await backend_log(world)
    assert not log or int(log[0]["seq"]) <= seq + 1, f"the model's log no longer holds request {seq + 1}"
    return [e for e in log if int(e["seq"]) > seq]


async def raw_request(world: World, method: str, target: str, headers: list[tuple[str, str]] | None = None,
                      body: bytes = b"") -> tuple[int, bytes]:
    """A request whose target goes on the wire exactly as written (no client-side normalisation)."""
    import asyncio

    host, port = world.stack.gateway_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers or ()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
