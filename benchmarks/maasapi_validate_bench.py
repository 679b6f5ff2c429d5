"""Benchmark: maas-api key validation (the gateway's hot path) against uvicorn + PostgreSQL on loopback.

Starts a throwaway PostgreSQL (maasctl.testenv.postgres), runs maas-api under uvicorn in a child process,
mints keys through the HTTP API, then drives POST /internal/v1/api-keys/validate open-loop at a fixed rate
(default 1000 req/s) for a bounded number of requests and prints p50/p99/max latency. Also measures mint and
list throughput. Everything is bounded in count and wall time.

    .venv/bin/python benchmarks/maasapi_validate_bench.py [--rate 1000] [--requests 10000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

TOKENS = {"bench-token": ("bench", ["bench-users", "system:authenticated"])}
GATEWAY_TOKEN = "bench-gateway"  # maas-api serves /internal only to the gateway (deny by default)


def serve_child(database_url: str, port: int) -> None:
    """Child process: maas-api on uvicorn with static identity/subscriptions (no cluster needed)."""
    import logging

    import structlog
    import uvicorn
    from pydantic import SecretStr

    from maasctl.contract.views import SubscribedModel, SubscriptionView, Tier
    from maasctl.eventloop import tune_gc
    from maasctl.maasapi.app import create_app
    from maasctl.maasapi.auth import Identity, StaticAuthenticator
    from maasctl.maasapi.settings import MaasApiSettings
    from maasctl.maasapi.sources import StaticSources

    # Access logs stay on (as in production) but go to a file, not the terminal.
    log_file = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    structlog.configure(
        processors=[structlog.processors.TimeStamper(fmt="iso"), structlog.processors.JSONRenderer()],
        logger_factory=structlog.WriteLoggerFactory(log_file),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING)
    # One user mints every key: the per-user mint limits are lifted, this measures mint throughput.
    settings = MaasApiSettings(database_url=database_url, port=port, db_pool_size=10,
                               gateway_tokens=(SecretStr(GATEWAY_TOKEN),), max_active_keys_per_user=1_000_000,
                               key_mints_per_minute=1_000_000)
    subs = StaticSources(
        [
            SubscriptionView(
                "models-as-a-service",
                "bench",
                groups=frozenset(("bench-users",)),
                priority=1,
                phase="Active",
                models=(SubscribedModel("llm", "m", (Tier(1000, "1m"),)),),
            )
        ]
    )
    authn = StaticAuthenticator({t: Identity(u, tuple(g)) for t, (u, g) in TOKENS.items()})
    app = create_app(settings, subs, authn)
    tune_gc()  # as maas-api's serve does
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def wait_ready(session: aiohttp.ClientSession, base: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("maas-api did not become ready")


async def measure_mint(
    session: aiohttp.ClientSession, base: str, count: int, concurrency: int
) -> tuple[list[str], float]:
    headers = {"Authorization": "Bearer bench-token"}
    keys: list[str] = []
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem, session.post(f"{base}/v1/api-keys", json={"name": f"bench-{i}"}, headers=headers) as r:
            body = await r.json()
            if r.status != 201:
                raise RuntimeError(f"mint failed: {r.status} {body}")
            keys.append(body["key"])

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return keys, count / (time.perf_counter() - start)


async def measure_list(session: aiohttp.ClientSession, base: str, count: int, concurrency: int) -> float:
    headers = {"Authorization": "Bearer bench-token"}
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem, session.get(f"{base}/v1/api-keys?limit=50", headers=headers) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"list failed: {r.status}")

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return count / (time.perf_counter() - start)


class RawConnections:
    """Minimal keep-alive HTTP/1.1 client for the load loop: the generator shares the 2 cores with the
    server, so it must cost as little CPU per request as possible (aiohttp costs ~3x more)."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.all: list[asyncio.StreamWriter] = []

    async def open(self) -> None:
        for _ in range(self.size):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.all.append(writer)
            self.idle.put_nowait((reader, writer))

    async def close(self) -> None:
        for w in self.all:
            w.close()

    async def post(self, request: bytes) -> tuple[int, bytes]:
        reader, writer = await self.idle.get()
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
        except BaseException:
            writer.close()
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.all.append(writer)
            raise
        finally:
            self.idle.put_nowait((reader, writer))
        return status, body


def validate_request(host: str, key: str) -> bytes:
    body = json.dumps({"key": key}).encode()
    return (
        f"POST /internal/v1/api-keys/validate HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {GATEWAY_TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def validate_load(
    conns: RawConnections, keys: list[str], rate: float, total: int, max_seconds: float
) -> dict[str, Any]:
    """Open loop: request i is due at start + i/rate whether or not earlier ones have finished; latency is
    measured from the due time, so time spent waiting for a free connection counts (no coordinated
    omission)."""
    latencies: list[float] = []
    errors = 0
    invalid = 0
    requests = [validate_request("maas-api", k) for k in keys]

    async def one(req: bytes, due: float) -> None:
        nonlocal errors, invalid
        try:
            status, body = await asyncio.wait_for(conns.post(req), timeout=10)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            errors += 1
            return
        latencies.append(time.perf_counter() - due)
        if status != 200:
            errors += 1
        elif b'"valid":true' not in body:
            invalid += 1

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if time.perf_counter() - start > max_seconds:
            break
        tasks.append(asyncio.create_task(one(random.choice(requests), due)))
    sent_duration = time.perf_counter() - start
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    ms = [x * 1000 for x in latencies] or [float("nan")]
    return {
        "requests": len(tasks),
        "completed": len(latencies),
        "errors": errors,
        "invalid": invalid,
        "offered_rate": round(len(tasks) / sent_duration, 1),
        "p50_ms": round(pct(ms, 0.50), 3),
        "p90_ms": round(pct(ms, 0.90), 3),
        "p99_ms": round(pct(ms, 0.99), 3),
        "max_ms": round(max(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def run(args: argparse.Namespace, database_url: str) -> dict[str, Any]:
    """maas-api in a child process (its own CPU), the load generator in this one."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", database_url, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=None,
    )
    try:
        load_before = os.getloadavg()[0]
        out = asyncio.run(drive(args, f"http://127.0.0.1:{port}"))
        out["machine"]["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        return out
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


async def drive(args: argparse.Namespace, base: str) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=args.connections, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await wait_ready(session, base, time.monotonic() + 60)
        keys, mint_rate = await measure_mint(session, base, args.keys, concurrency=8)
        list_rate = await measure_list(session, base, args.list_requests, concurrency=8)
    host, port = base.removeprefix("http://").split(":")
    conns = RawConnections(host, int(port), args.connections)
    await conns.open()
    try:
        # warm-up (connection pools, statement caches), not measured
        await validate_load(conns, keys, rate=args.rate, total=min(1000, args.requests), max_seconds=5)
        result = await validate_load(conns, keys, args.rate, args.requests, args.max_seconds)
    finally:
        await conns.close()
    return {
        "validate": result,
        "mint_per_s": round(mint_rate, 1),
        "list_per_s": round(list_rate, 1),
        "keys": len(keys),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve_child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=1000.0, help="validation requests per second")
    parser.add_argument("--requests", type=int, default=10_000, help="validation requests to send (bounded)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="stop sending after this long")
    parser.add_argument("--keys", type=int, default=200, help="keys to mint (also the mint throughput sample)")
    parser.add_argument("--list-requests", type=int, default=300)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--database-url", default=None, help="use this PostgreSQL instead of a throwaway one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from maasctl.testenv.postgres import postgres_server

    if args.database_url:
        out = run(args, args.database_url)
    else:
        with postgres_server() as pg:
            out = run(args, pg.url)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    v = out["validate"]
    print(
        f"validate @ {v['offered_rate']} req/s offered, {v['completed']}/{v['requests']} completed, "
        f"errors={v['errors']} invalid={v['invalid']}"
    )
    print(
        f"  p50={v['p50_ms']} ms  p90={v['p90_ms']} ms  p99={v['p99_ms']} ms  max={v['max_ms']} ms  "
        f"mean={v['mean_ms']} ms"
    )
    print(f"machine: {out['machine']}")
    print(f"mint: {out['mint_per_s']} keys/s (concurrency 8)   list: {out['list_per_s']} req/s (concurrency 8)")


if __name__ == "__main__":
    main()
