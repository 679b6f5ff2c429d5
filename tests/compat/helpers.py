"""What the compatibility tests share: a served model and plain HTTP calls to maas-api and the gateway."""

from __future__ import annotations

from typing import Any

import httpx
from e2e.conftest import World

from maasctl.tls import default_tls


async def served_model(world: World, model: str = "gpt", user: str = "alice", limit: int = 100_000) -> tuple[str, str]:
    """A published external model that `user` may call with a key; returns (subscription, key)."""
    await world.apply(*world.external_model(model))
    sub = world.name("s")
    await world.apply(world.auth_policy(world.name("ap"), [model], users=(user,)),
                      world.subscription(sub, {model: [(limit, "1m")]}, users=(user,)))
    await world.wait_active(sub)
    key = str((await world.mint(user, subscription=sub))["key"])
    await world.wait_enforced(model, key)
    return sub, key


async def api(world: World, method: str, path: str, *, token: str | None = None,
              headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
    """One call to maas-api (directly, as an in-cluster client would)."""
    sent = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        return await http.request(method, path, headers={**sent, **(headers or {})}, **kwargs)


async def gateway(world: World, method: str, path: str, *, headers: dict[str, str] | None = None,
                  **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        return await http.request(method, path, headers=headers or {}, **kwargs)


def chat_body(model: str = "gpt-x") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]}
