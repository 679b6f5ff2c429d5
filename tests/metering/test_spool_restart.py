"""A gateway killed outright (SIGKILL) while maas-api cannot take its usage records loses none of them: the next
gateway started on the same usage spool sends them, and maas-api stores each served request exactly once.
Real processes: the local stack's maas-api, and `maasctl gateway` replicas next to its gateway."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from e2e.conftest import Need, World, eventually

from maasctl.testenv.controlplane import free_port
from maasctl.tls import default_tls
from tests.metering.test_counting import setup

pytestmark = pytest.mark.local_stack  # starts and kills gateway processes next to the stack's own


def spooled_ids(directory: Path, key_id: str) -> list[str]:
    """Request ids of `key_id`'s records in a spool directory (what a killed gateway left)."""
    ids = []
    for segment in sorted(directory.glob("usage-*.jsonl")):
        for line in segment.read_bytes().splitlines():
            record = json.loads(line)
            if record["key_id"] == key_id:
                ids.append(record["request_id"])
    return ids


async def stored(world: World, key_id: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
        r = await http.get("/v1/usage/records", params={"keyId": key_id, "limit": 1000},
                           headers=world.admin_headers())
    assert r.status_code == 200, r.text
    return list(r.json())


async def chat(gateway: str, world: World, key: str) -> int:
    async with httpx.AsyncClient(base_url=gateway, timeout=30, verify=default_tls()) as http:
        r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                            json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    return r.status_code


async def test_records_of_a_killed_gateway_are_delivered_by_the_next_one_exactly_once(world: World) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    _, _, sub = await setup(world)
    minted = await world.mint("alice", subscription=sub.split("/", 1)[1])  # used only through the replicas
    key, key_id = str(minted["key"]), str(minted["id"])
    name = world.name("spool-gw")
    spool = local.spool_dir(name)
    unreachable = f"http://127.0.0.1:{free_port()}"  # nobody listens: every usage batch fails
    try:
        first = await local.add_gateway(name, usage_url=unreachable)
        served = 0

        async def first_served() -> bool:  # the replica's first answer may precede its policy decisions
            nonlocal served
            ok = await chat(first, world, key) == 200
            served += ok
            return ok

        await eventually(first_served, timeout=30)
        for _ in range(5):
            assert await chat(first, world, key) == 200
            served += 1

        async def all_spooled() -> bool:  # each record is on disk once the request completed
            return len(spooled_ids(spool, key_id)) >= served

        await eventually(all_spooled, timeout=10)
        before = spooled_ids(spool, key_id)
        assert key not in "".join(p.read_text() for p in spool.glob("usage-*.jsonl"))  # records hold no secret
        await asyncio.to_thread(local.processes[name].kill)  # as the OOM killer would: no shutdown code
        assert await stored(world, key_id) == []  # maas-api never got them: the spool is all there is

        await local.add_gateway(name)  # same spool, reachable maas-api

        async def delivered() -> bool:
            return len(await stored(world, key_id)) >= served

        await eventually(delivered, timeout=30)

        async def spool_emptied() -> bool:  # acknowledged records are forgotten: their segments deleted
            return not list(spool.glob("usage-*.jsonl"))

        await eventually(spool_emptied, timeout=10)
        records = await stored(world, key_id)
        ids = [str(r["id"]) for r in records]
        assert sorted(ids) == sorted(before) and len(set(ids)) == len(ids)  # none lost, none twice
        assert sum(r["status"] == 200 for r in records) == served  # exactly the requests served
        await asyncio.sleep(1.5)  # nothing else arrives later (a second replay, a resend)
        assert len(await stored(world, key_id)) == len(ids)
    finally:
        proc = local.processes.pop(name, None)
        if proc is not None:
            await asyncio.to_thread(proc.stop)
