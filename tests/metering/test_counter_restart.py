"""A gateway killed outright (SIGKILL) keeps its token counts: an exhausted 24-hour limit stays exhausted in the
gateway started after it, whether the counters are in process (journaled beside the usage spool) or in Redis.
Real processes: `maasctl gateway` replicas next to the local stack's gateway, killed and started again."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from e2e.conftest import Need, World, eventually

from maasctl.testenv.redis import RedisServer
from tests.metering.test_spool_restart import chat

pytestmark = pytest.mark.local_stack  # starts and kills gateway processes next to the stack's own


@pytest.mark.parametrize("store", ["in-process", "redis"])
async def test_an_exhausted_daily_limit_stays_exhausted_after_kill_9(
        store: str, world: World, redis_server: RedisServer) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    await world.apply(*world.external_model("gpt"))
    sub = world.name("daily")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(sub, {"gpt": [(100, "24h")]}, users=("alice",)))
    await world.wait_active(sub)
    key = str((await world.mint("alice", subscription=sub))["key"])
    await world.wait_enforced("gpt", key)
    name = world.name("counters-gw")
    redis_url = redis_server.url if store == "redis" else None
    try:
        first = await local.add_gateway(name, redis_url)

        async def first_served() -> bool:  # the replica's first answer may precede its policy decisions
            try:
                return await chat(first, world, key) == 200
            except httpx.TransportError:  # once refused right after readyz on a loaded machine: asked again
                return False

        await eventually(first_served, timeout=30)
        statuses = [200]
        while statuses[-1] == 200 and len(statuses) < 50:
            statuses.append(await chat(first, world, key))
        assert statuses[-1] == 429 and 2 <= statuses.count(200) <= 8, statuses  # 100 tokens, about 15 a call
        await asyncio.to_thread(local.processes[name].kill)  # as the OOM killer would: no shutdown code

        again = await local.add_gateway(name, redis_url)  # same spool directory, same Redis
        after: list[int] = []

        async def refused() -> bool:
            after.append(await chat(again, world, key))
            return after[-1] == 429

        await eventually(refused, timeout=30)
        for _ in range(3):
            after.append(await chat(again, world, key))
        assert 200 not in after and after[-3:] == [429] * 3, after  # the exhausted window was not forgotten
    finally:
        proc = local.processes.pop(name, None)
        if proc is not None:
            await asyncio.to_thread(proc.stop)
