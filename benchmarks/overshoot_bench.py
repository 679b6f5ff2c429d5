"""Benchmark: how far a burst of concurrent requests overshoots a token limit, and what admission costs.

Starts the whole local stack (control plane, controller, maas-api, test model, gateway) with its token
counters in a real Redis server, then two more gateway replicas of the same Gateway: one sharing that Redis,
one counting in process. Each scenario gets its own subscription (100 tokens per hour, the test model answers
15 tokens a request), a key, one warm-up request per replica it uses, then C requests at once spread
round-robin over its replicas. Each reserves its own bound (prompt estimate plus `--max-tokens`, or the
completion ceiling when the request states none), at most one more than the limit. Overshoot = tokens served in
the window beyond the limit.

``--workers N`` adds a replica of N worker processes (`maasctl gateway --workers N`, one port) sharing the same
Redis, and two setups: that replica alone (the kernel spreads the burst's connections over its workers) and it
next to the first Redis replica; each such row also says how many of the burst's requests each worker took
(`maas_worker_requests_total`). ``--only-workers`` runs only those setups and skips the latency part.

Then what the gateway costs (API key auth, subscription selection by maas-api, reservation on every rate,
settlement, usage record to maas-api) on an unlimited subscription: N sequential requests to the test model
directly and through the gateway with each counter store (p50/p99), and requests/s with C concurrent clients.

    .venv/bin/python benchmarks/overshoot_bench.py [--concurrency 10,50,100] [--requests 300] [--clients 16]
        [--max-seconds 30] [--max-tokens N] [--workers N [--only-workers]] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s

from maasctl import samples
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY
from maasctl.runtime import Client
from maasctl.settings import ControllerSettings
from maasctl.testenv.redis import start_redis

MAAS = "maas.opendatahub.io/v1alpha1"
NS = "bench"
LIMIT = 100
SETTINGS = ControllerSettings(gateway_name="maas-default-gateway", gateway_namespace="maas-gateway",
                              leader_election_namespace="opendatahub", max_concurrent_reconciles=4)


@dataclass(frozen=True)
class Scenario:
    label: str
    gateways: tuple[str, ...]  # replica names in `urls`
    concurrency: int

    @property
    def subscription(self) -> str:
        return f"burst-{self.label}-{self.concurrency}"


def model_objects(stack: LocalStack, sub_ns: str, subscriptions: list[str]) -> list[dict[str, Any]]:
    refs = [{"name": "gpt", "namespace": NS}]
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": NS},
         "stringData": {"api-key": stack.options.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": "provider", "namespace": NS},
         "spec": {"provider": "openai", "endpoint": f"{stack.model_url}/v1", "targetModel": "gpt-x",
                  "credentialRef": {"name": "provider-key"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "gpt", "namespace": NS},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}},
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": "bench", "namespace": sub_ns},
         "spec": {"modelRefs": refs, "subjects": {"users": ["alice", "bob"]}}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": "unlimited", "namespace": sub_ns},
         "spec": {"owner": {"users": ["bob"]}, "modelRefs": [{**refs[0], "unlimited": True}]}},
    ]
    for name in subscriptions:
        objs.append({"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": name, "namespace": sub_ns},
                     "spec": {"owner": {"users": ["alice"]},
                              "modelRefs": [{**refs[0], "tokenRateLimits": [{"limit": LIMIT, "window": "1h"}]}]}})
    return objs


async def wait_active(stack: LocalStack, names: list[str], timeout: float = 120) -> None:
    custom = k8s.CustomObjectsApi(stack.api)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            obj = await custom.get_namespaced_custom_object(
                "maas.opendatahub.io", "v1alpha1", stack.settings.subscription_namespace, "maassubscriptions", name)
            if (obj.get("status") or {}).get("phase") == "Active":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"subscription {name} not Active after {timeout}s: {obj.get('status')}")
            await asyncio.sleep(0.2)


async def mint(http: aiohttp.ClientSession, stack: LocalStack, user: str, subscription: str) -> str:
    token = stack.control_plane.users[user].token
    async with http.post(f"{stack.api_url}/v1/api-keys", json={"name": f"k-{uuid.uuid4().hex[:6]}",
                                                                "subscription": subscription},
                         headers={"Authorization": f"Bearer {token}"}) as resp:
        body = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"mint for {user}/{subscription}: {resp.status} {body}")
        return str(body["key"])


PAYLOAD = {"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}]}


async def chat(http: aiohttp.ClientSession, base: str, key: str, max_tokens: int | None = None) -> int:
    payload = PAYLOAD if max_tokens is None else {**PAYLOAD, "max_tokens": max_tokens}
    async with http.post(f"{base}/{NS}/gpt/v1/chat/completions", json=payload,
                         headers={"Authorization": f"Bearer {key}"}) as resp:
        await resp.read()
        return resp.status


async def served_once(http: aiohttp.ClientSession, base: str, key: str, timeout: float = 60) -> None:
    """Warm-up: until this replica serves the key (policies picked up). Refusals before that cost nothing."""
    deadline = time.monotonic() + timeout
    while (status := await chat(http, base, key)) != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{base} still answers {status} after {timeout}s")
        await asyncio.sleep(0.2)


async def charged(http: aiohttp.ClientSession, stack: LocalStack, subscription: str, requests: int,
                  timeout: float = 30) -> int:
    """Tokens maas-api recorded for the subscription, once the usage records of all served requests arrived."""
    assert stack.admin_token_file is not None
    admin_token = stack.admin_token_file.read_text().strip()
    deadline = time.monotonic() + timeout
    while True:
        async with http.get(f"{stack.api_url}/v1/usage/records", params={"subscription": subscription, "limit": "1000"},
                            headers={"Authorization": f"Bearer {admin_token}"}) as resp:
            records = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"usage records: {resp.status} {records}")
        served = [r for r in records if r["status"] == 200]
        if len(served) >= requests:
            return sum(int(r["chargedTokens"]) for r in served)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{subscription}: {len(served)} usage records of {requests} after {timeout}s")
        await asyncio.sleep(0.2)


async def worker_requests(http: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """`maas_worker_requests_total` of a gateway, by worker index (its workers' sum, whichever answers)."""
    async with http.get(f"{base}/_gateway/metrics") as resp:
        text = await resp.text()
    prefix = 'maas_worker_requests_total{worker="'
    return {line[len(prefix):].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


async def burst(http: aiohttp.ClientSession, stack: LocalStack, urls: dict[str, str], scenario: Scenario,
                key: str, max_tokens: int | None = None) -> dict[str, Any]:
    for name in scenario.gateways:
        await served_once(http, urls[name], key)
    pooled = "workers" in scenario.gateways
    before = await worker_requests(http, urls["workers"]) if pooled else {}
    bases = [urls[scenario.gateways[i % len(scenario.gateways)]] for i in range(scenario.concurrency)]
    statuses = await asyncio.gather(*(chat(http, base, key, max_tokens) for base in bases))
    after = await worker_requests(http, urls["workers"]) if pooled else {}
    served = statuses.count(200)
    other = [s for s in statuses if s not in (200, 429)]
    if other:
        raise RuntimeError(f"{scenario}: unexpected statuses {sorted(set(other))}")
    used = await charged(http, stack, scenario.subscription, served + len(scenario.gateways))
    return {"setup": scenario.label, "replicas": len(scenario.gateways), "concurrency": scenario.concurrency,
            "served_in_burst": served, "refused": statuses.count(429), "tokens_used": used,
            "overshoot_tokens": max(0, used - LIMIT),
            "per_worker": [int(after[w] - before.get(w, 0)) for w in sorted(after)]}


async def request_ok(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    """One chat completion, read to the end; anything but 200 ends the benchmark."""
    async with http.post(url, json=PAYLOAD, headers=headers) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status}")


async def latencies(http: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await request_ok(http, url, headers)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def throughput(http: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int, clients: int,
                     max_seconds: float) -> float:
    """Requests per second that `clients` concurrent clients get, for at most `n` requests or `max_seconds`."""
    done = 0
    start = time.perf_counter()

    async def client() -> None:
        nonlocal done
        while done < n and time.perf_counter() - start < max_seconds:
            await request_ok(http, url, headers)
            done += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return done / (time.perf_counter() - start)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def accept_gateway(stack: LocalStack) -> Client:
    """Create the stack's Gateway object, Accepted as a gateway controller would; a client for more objects."""
    client = Client(stack.api)
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    await client.apply(samples.gateway(stack.settings, port), field_manager="bench")
    await client.patch(GATEWAY, SETTINGS.gateway_name, SETTINGS.gateway_namespace, samples.gateway_status(),
                       subresource="status")
    return client


async def main(args: argparse.Namespace) -> dict[str, Any]:
    redis = start_redis()
    tmp = tempfile.TemporaryDirectory(prefix="maasctl-overshoot-")
    stack = LocalStack(StackOptions(directory=Path(tmp.name), settings=SETTINGS, redis_url=redis.url))
    try:
        await stack.start()
        client = await accept_gateway(stack)
        urls = {"redis-1": stack.gateway_url}
        setups: dict[str, tuple[str, ...]] = {}
        if not args.only_workers:
            urls |= {"redis-2": await stack.add_gateway("gateway-2", redis.url),
                     "in-process": await stack.add_gateway("gateway-local")}
            setups |= {"in-process counters, 1 replica": ("in-process",),
                       "Redis counters, 1 replica": ("redis-1",),
                       "Redis counters, 2 replicas": ("redis-1", "redis-2")}
        if args.workers > 1:
            urls["workers"] = await stack.add_gateway("gateway-workers", redis.url, workers=args.workers)
            setups |= {f"Redis counters, 1 replica of {args.workers} workers": ("workers",),
                       f"Redis counters, 2 replicas (1 process + {args.workers} workers)": ("redis-1", "workers")}
        scenarios = [Scenario(f"s{i}", gws, c) for i, gws in enumerate(setups.values()) for c in args.concurrency]
        labels = {f"s{i}": label for i, label in enumerate(setups)}
        await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        sub_ns = stack.settings.subscription_namespace
        for obj in model_objects(stack, sub_ns, [s.subscription for s in scenarios]):
            await client.apply(obj, field_manager="bench")
        await wait_active(stack, ["unlimited", *(s.subscription for s in scenarios)])
        per_request = stack.options.prompt_tokens + stack.options.completion_tokens
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
            rows = []
            for scenario in scenarios:
                key = await mint(http, stack, "alice", scenario.subscription)
                # a session of its own: no connection kept from an earlier burst decides which worker serves
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                 timeout=aiohttp.ClientTimeout(total=60)) as fresh:
                    row = await burst(fresh, stack, urls, scenario, key, args.max_tokens)
                row["setup"] = labels[scenario.label]
                rows.append(row)
                print(row, file=sys.stderr)
            if args.only_workers:
                return {"limit_tokens": LIMIT, "tokens_per_request": per_request, "bursts": rows}
            bob = await mint(http, stack, "bob", "unlimited")
            for name in ("redis-1", "in-process"):
                await served_once(http, urls[name], bob)
            direct = {"Authorization": f"Bearer {stack.options.upstream_key}"}
            paths = {
                "test model directly": (f"{stack.model_url}/v1/chat/completions", direct),
                "gateway, in-process counters": (f"{urls['in-process']}/{NS}/gpt/v1/chat/completions",
                                                 {"Authorization": f"Bearer {bob}"}),
                "gateway, Redis counters": (f"{urls['redis-1']}/{NS}/gpt/v1/chat/completions",
                                            {"Authorization": f"Bearer {bob}"}),
            }
            timings = {name: await latencies(http, url, headers, args.requests)
                       for name, (url, headers) in paths.items()}
            rates = {name: await throughput(http, url, headers, args.requests * 4, args.clients, args.max_seconds)
                     for name, (url, headers) in paths.items()}
        return {
            "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
            "limit_tokens": LIMIT, "tokens_per_request": per_request, "bursts": rows,
            "latency_ms": {name: {"p50": round(statistics.median(v), 2), "p99": round(pct(v, 0.99), 2)}
                           for name, v in timings.items()},
            "clients": args.clients,
            "requests_per_second": {name: round(rate, 1) for name, rate in rates.items()},
        }
    finally:
        await stack.stop()
        redis.stop()
        tmp.cleanup()


def render(result: dict[str, Any]) -> str:
    lines = [f"limit {result['limit_tokens']} tokens per hour, {result['tokens_per_request']} tokens a request",
             "", "| setup | concurrency | served in burst | refused | tokens used | overshoot |",
             "|---|---|---|---|---|---|"]
    for r in result["bursts"]:
        taken = f" (requests per worker: {' / '.join(map(str, r['per_worker']))})" if r["per_worker"] else ""
        lines.append(f"| {r['setup']} | {r['concurrency']} | {r['served_in_burst']} | {r['refused']} | "
                     f"{r['tokens_used']} | {r['overshoot_tokens']}{taken} |")
    if "latency_ms" not in result:
        return "\n".join(lines)
    lines += ["", f"| path | p50 ms | p99 ms | requests/s ({result['clients']} clients) |", "|---|---|---|---|"]
    for name, v in result["latency_ms"].items():
        lines.append(f"| {name} | {v['p50']} | {v['p99']} | {result['requests_per_second'][name]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[10, 50, 100])
    parser.add_argument("--requests", type=int, default=300, help="sequential requests per path")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients for requests/s")
    parser.add_argument("--max-seconds", type=float, default=30, help="time bound of each requests/s run")
    parser.add_argument("--max-tokens", type=int, help="max_tokens of the burst requests (default: none stated, "
                        "so each reserves the completion ceiling, at most the limit)")
    parser.add_argument("--workers", type=int, default=0, help="add a replica of this many worker processes")
    parser.add_argument("--only-workers", action="store_true", help="only the setups with the workers' replica")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    out = asyncio.run(main(ns))
    print(json.dumps(out, indent=2) if ns.json else render(out))
