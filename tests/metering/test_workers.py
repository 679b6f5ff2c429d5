"""A gateway of two worker processes (`maasctl gateway --workers 2`, one port, SO_REUSEPORT) next to the local
stack, its counters in a real Redis: a token limit is one limit whichever worker serves a request, a worker
killed outright loses none of its spooled usage records and is started again by its parent (whose pool is
unready meanwhile), and SIGTERM drains in-flight requests with their records. The payload processor's pool
(`maasctl payload-processor --workers 2`) behind a gateway: served, a killed worker started again, SIGTERM.
Real processes throughout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e.conftest import Need, World, eventually
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from maasctl.gateway import start_http
from maasctl.gateway.server import HttpServer
from maasctl.testenv.redis import RedisServer
from maasctl.testmodel import ModelServerConfig, create_app
from maasctl.tls import default_tls
from tests.metering.test_counting import setup
from tests.metering.test_spool_restart import chat, spooled_ids

pytestmark = pytest.mark.local_stack  # starts, kills and stops gateway processes next to the stack's own

TOKENS_PER_CALL = 15  # what the test model answers


def worker_pids(parent: int) -> list[int]:
    """The worker processes of a pool's parent (spawned interpreters: `multiprocessing.spawn` in their command)."""
    children = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        children += [int(pid) for pid in (task / "children").read_text().split()]
    return [pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def worker_index(pid: int, spool: Path) -> int | None:
    """The worker whose spool directory `pid` holds open (its lock), from its open files."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            m = re.fullmatch(re.escape(str(spool)) + r"/worker-(\d+)/lock", os.readlink(fd))
            if m:
                return int(m.group(1))
    return None


def parent_pid(world: World, name: str) -> int:
    assert world.stack.local is not None
    popen = world.stack.local.processes[name].popen
    assert popen is not None
    return popen.pid


async def metrics(gateway: str, path: str = "/_gateway/metrics") -> dict[str, float]:
    """`/_gateway/metrics` as {sample with labels: value} (any worker answers: the pool's sum)."""
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        text = (await http.get(f"{gateway}{path}")).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


async def readyz(gateway: str, path: str = "/_gateway/readyz") -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        r = await http.get(f"{gateway}{path}")
    return r.status_code, r.json()


async def stop_gateway(world: World, name: str) -> None:
    assert world.stack.local is not None
    proc = world.stack.local.processes.pop(name, None)
    if proc is not None:
        await asyncio.to_thread(proc.stop)


async def test_a_token_limit_is_one_limit_across_workers_that_both_serve(
        world: World, redis_server: RedisServer) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    limit = 20 * TOKENS_PER_CALL
    await world.apply(*world.external_model("gpt"))
    sub = world.name("pooled")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(sub, {"gpt": [(limit, "1h")]}, users=("alice",)))
    await world.wait_active(sub)
    key = str((await world.mint("alice", subscription=sub))["key"])
    await world.wait_enforced("gpt", key)  # through the stack's own gateway: its counters are not in this Redis
    name = world.name("pool-gw")
    try:
        gateway = await local.add_gateway(name, redis_server.url, workers=2)
        status, report = await readyz(gateway)
        assert status == 200 and report["workers"] == {"configured": 2, "ready": 2}, report
        statuses: list[int] = []

        async def first_served() -> bool:  # the pool's first answer may precede its policy decisions
            statuses.append(await chat(gateway, world, key))
            return statuses[-1] == 200

        await eventually(first_served, timeout=30)
        statuses = [200]
        while statuses[-1] == 200 and len(statuses) < 60:  # one connection each: the kernel picks a worker
            statuses.append(await chat(gateway, world, key))
        statuses += [await chat(gateway, world, key) for _ in range(10)]
        served = statuses.count(200)
        # one limit: at most its worth and one request more (two per-worker counters would serve about twice)
        assert limit // TOKENS_PER_CALL <= served <= limit // TOKENS_PER_CALL + 1, statuses
        assert set(statuses[served:]) == {429}, statuses
        taken = await metrics(gateway)
        per_worker = [taken.get(f'maas_worker_requests_total{{worker="{i}"}}', 0) for i in (0, 1)]
        assert all(n > 0 for n in per_worker) and sum(per_worker) >= len(statuses), per_worker  # both served
        assert taken["maas_worker_restarts_total"] == 0 and taken['maas_workers{state="ready"}'] == 2
    finally:
        await stop_gateway(world, name)


class UsageStandIn:
    """maas-api's usage endpoint, refusing (503) until `open` is set: records wait in the workers' spools."""

    def __init__(self) -> None:
        self.open = False
        self.ids: list[str] = []

    async def record(self, request: Request) -> JSONResponse:
        if not self.open:
            return JSONResponse({"error": "unavailable"}, 503)
        self.ids += [str(r["request_id"]) for r in (await request.json())["records"]]
        return JSONResponse({"accepted": True}, 202)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/internal/v1/usage", self.record, methods=["POST"])])


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[HttpServer]:
    server = await start_http(app)
    try:
        yield server
    finally:
        await server.stop()


async def test_a_killed_worker_loses_no_record_and_is_started_again(world: World, redis_server: RedisServer) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    key, key_id, _ = await setup(world)
    name = world.name("pool-kill")
    spool = local.spool_dir(name)
    usage = UsageStandIn()
    async with serving(usage.app()) as stand_in:
        try:
            gateway = await local.add_gateway(name, redis_server.url, usage_url=stand_in.url, workers=2)
            await eventually(lambda: _served(gateway, world, key), timeout=30)
            for _ in range(11):
                assert await chat(gateway, world, key) == 200

            def on_disk() -> list[str]:
                return [i for d in sorted(spool.glob("worker-*")) for i in spooled_ids(d, key_id)]

            async def all_spooled() -> bool:  # maas-api refuses: every record waits on disk
                return len(on_disk()) >= 12

            await eventually(all_spooled, timeout=10)
            before = on_disk()
            pids = worker_pids(parent_pid(world, name))
            assert len(pids) == 2, pids
            holding = {worker_index(pid, spool): pid for pid in pids}
            victim = next(i for i in (0, 1) if spooled_ids(spool / f"worker-{i}", key_id))
            os.kill(holding[victim], signal.SIGKILL)  # as the OOM killer would: no shutdown code
            seen: list[int] = []

            async def restarted() -> bool:  # unready until the new worker serves, then ready again
                try:
                    status, report = await readyz(gateway)
                except httpx.TransportError:  # a probe the killed worker's socket took and dropped: a failed probe
                    seen.append(0)
                    return False
                seen.append(status)
                return status == 200 and report["workers"]["ready"] == 2 and 503 in seen

            await eventually(restarted, timeout=60)
            assert (await metrics(gateway))["maas_worker_restarts_total"] == 1
            assert len(new := worker_pids(parent_pid(world, name))) == 2 and holding[victim] not in new
            usage.open = True  # maas-api is back: both workers send, the new one what the killed one left

            async def delivered() -> bool:
                return set(before) <= set(usage.ids)

            await eventually(delivered, timeout=30)
            assert len(before) == len(set(before)) == 12  # each served request exactly once on disk
        finally:
            await stop_gateway(world, name)


async def _served(gateway: str, world: World, key: str) -> bool:
    try:
        return await chat(gateway, world, key) == 200
    except httpx.TransportError:
        return False


class Arrivals:
    """ASGI wrapper counting requests that reached the model (so the test knows they are in flight)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.count += 1
        await self.app(scope, receive, send)


async def test_sigterm_drains_the_workers_in_flight_requests_and_their_records(
        world: World, redis_server: RedisServer) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    slow = Arrivals(create_app(ModelServerConfig(models=("gpt-x",), require_bearer=world.stack.upstream_key,
                                                 latency=2.0)))
    usage = UsageStandIn()
    usage.open = True
    async with serving(slow) as model, serving(usage.app()) as stand_in:
        objs = world.external_model("gpt")
        objs[1]["spec"]["endpoint"] = f"{model.url}/v1"
        await world.apply(*objs)
        sub = world.name("drain")
        await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                          world.subscription(sub, {"gpt": [(1_000_000, "1m")]}, users=("alice",)))
        await world.wait_active(sub)
        key = str((await world.mint("alice", subscription=sub))["key"])
        await world.wait_enforced("gpt", key)
        name = world.name("pool-drain")
        try:
            gateway = await local.add_gateway(name, redis_server.url, usage_url=stand_in.url, workers=2)
            served = 0

            async def first_served() -> bool:
                nonlocal served
                ok = await _served(gateway, world, key)
                served += ok
                return ok

            await eventually(first_served, timeout=30)
            arrived = slow.count
            calls = [asyncio.create_task(chat(gateway, world, key)) for _ in range(6)]

            async def in_flight() -> bool:  # all six reached the model: each is inside a worker now
                return slow.count - arrived >= 6

            await eventually(in_flight, timeout=20)
            parent = local.processes[name].popen
            assert parent is not None
            parent.send_signal(signal.SIGTERM)
            assert await asyncio.gather(*calls) == [200] * 6  # every in-flight request answered
            assert await asyncio.to_thread(parent.wait, 30) == 0
            # the workers flushed every record before they exited: none waits in a spool
            assert len(usage.ids) == len(set(usage.ids)) == served + 6
            assert not [p for p in local.spool_dir(name).glob("worker-*/usage-*.jsonl") if p.read_bytes()]
            with pytest.raises(httpx.ConnectError):  # and nothing listens any more
                await chat(gateway, world, key)
        finally:
            await stop_gateway(world, name)


async def test_a_processor_of_two_workers_serves_and_starts_a_killed_worker_again(
        world: World, redis_server: RedisServer) -> None:
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    key, _, _ = await setup(world)
    name, front = world.name("pool-pp"), world.name("pool-pp-gw")
    try:
        processor = await local.add_processor(name, redis_server.url, workers=2)
        health = processor.health_url  # the parent's: every worker ready
        assert (await metrics(health, "/metrics"))['maas_workers{state="ready"}'] == 2
        gateway = await local.add_gateway(front, redis_server.url, processor=processor)
        await eventually(lambda: _served(gateway, world, key), timeout=30)
        for _ in range(5):
            assert await chat(gateway, world, key) == 200
        taken = await metrics(health, "/metrics")  # both filters' streams, whichever worker took them
        assert sum(v for k, v in taken.items() if k.startswith("maas_worker_requests_total")) >= 12
        pids = worker_pids(parent_pid(world, name))
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGKILL)
        seen: list[int] = []

        async def restarted() -> bool:
            status, _ = await readyz(health, "/readyz")
            seen.append(status)
            return status == 200 and 503 in seen

        await eventually(restarted, timeout=60)
        assert (await metrics(health, "/metrics"))["maas_worker_restarts_total"] == 1
        await eventually(lambda: _served(gateway, world, key), timeout=30)  # Envoy's side reconnects
        parent = local.processes[name].popen
        assert parent is not None
        parent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(parent.wait, 30) == 0
    finally:
        await stop_gateway(world, front)
        await stop_gateway(world, name)
