"""Benchmark: what a request's reserved bound costs a subscriber (issue 33, "Reservations that do not refuse the
budget a caller has").

A request reserves its own bound before it is served: the prompt estimate plus its completion limit, which is
`max_tokens` (or `max_completion_tokens` / `max_output_tokens`) when stated, else the model's
`maxCompletionTokens`, else 4,096. Two models on the same provider, both called on the one base URL with no
`max_tokens` (as most SDK users call): `plain` (no ceiling: reserves ~4,100 tokens a request) and `bounded`
(`maxCompletionTokens: --ceiling`, which the data plane also sends upstream as `max_tokens`, so the reservation
is true). The test model answers 15 tokens (10 in, 5 out) after `--latency` seconds, so requests overlap.

1. Served share: a subscription of `--budget` tokens per minute, `--requests` requests with `--concurrency`
   in flight. The budget covers every request's real use many times over; what is refused is refused by
   reservations alone.
2. Overshoot: a subscription of `--small-limit` tokens per hour, `--concurrency` requests at once, each asking
   the test model to generate `--generate` tokens (`x-testmodel-completion`; capped by the request's
   `max_tokens`, as a provider caps its generation). Overshoot = tokens charged beyond the limit; the rule is
   at most one request's bound. A generation beyond the 4,096 default shows why the bound must be sent.

Starts the whole local stack (control plane, controller, maas-api, test model, gateway with in-process counters).

    .venv/bin/python benchmarks/reservation_bound_bench.py [--requests 400] [--concurrency 200]
        [--budget 100000] [--ceiling 256] [--small-limit 20000] [--generate 4000,8000] [--latency 0.2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from overshoot_bench import SETTINGS, accept_gateway, charged, mint, wait_active

from maasctl.localstack import LocalStack, StackOptions

MAAS = "maas.opendatahub.io/v1alpha1"
NS = "bench-bound"
MODELS = ("plain", "bounded")


def objects(stack: LocalStack, ceiling: int, budget: int, small: int, generate: list[int]
            ) -> tuple[list[dict[str, Any]], list[str]]:
    sub_ns = stack.settings.subscription_namespace
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": NS},
         "stringData": {"api-key": stack.options.upstream_key}},
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": "bench-bound", "namespace": sub_ns},
         "spec": {"modelRefs": [{"name": m, "namespace": NS} for m in MODELS], "subjects": {"users": ["alice"]}}},
    ]
    subs = []
    for model in MODELS:
        spec: dict[str, Any] = {"modelRef": {"kind": "ExternalModel", "name": model}}
        if model == "bounded":
            spec["maxCompletionTokens"] = ceiling
        objs += [
            {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": model, "namespace": NS},
             "spec": {"provider": "openai", "endpoint": f"{stack.model_url}/v1", "targetModel": "gpt-x",
                      "credentialRef": {"name": "provider-key"}}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": model, "namespace": NS}, "spec": spec},
        ]
        for kind, limit, window in (("served", budget, "1m"), *((f"over{g}", small, "1h") for g in generate)):
            name = f"{kind}-{model}"
            subs.append(name)
            ref = {"name": model, "namespace": NS, "tokenRateLimits": [{"limit": limit, "window": window}]}
            objs.append({"apiVersion": MAAS, "kind": "MaaSSubscription",
                         "metadata": {"name": name, "namespace": sub_ns},
                         "spec": {"owner": {"users": ["alice"]}, "modelRefs": [ref]}})
    return objs, subs


async def call(http: aiohttp.ClientSession, base: str, key: str, model: str, generate: int | None = None) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {key}"}
    if generate is not None:
        headers["x-testmodel-completion"] = str(generate)
    async with http.post(f"{base}/v1/chat/completions", json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def warm(http: aiohttp.ClientSession, base: str, key: str, model: str, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (status := await call(http, base, key, model)) != 200:
        if loop.time() > deadline:
            raise RuntimeError(f"{model}: still {status} after {timeout}s")
        await asyncio.sleep(0.2)


async def run(http: aiohttp.ClientSession, base: str, key: str, model: str, requests: int, concurrency: int,
              generate: int | None = None) -> list[int]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> int:
        async with gate:
            return await call(http, base, key, model, generate)

    statuses = await asyncio.gather(*(one() for _ in range(requests)))
    other = sorted({s for s in statuses if s not in (200, 429)})
    if other:
        raise RuntimeError(f"{model}: unexpected statuses {other}")
    return list(statuses)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory(prefix="maasctl-bound-")
    stack = LocalStack(StackOptions(directory=Path(tmp.name), settings=SETTINGS, model_latency=args.latency))
    try:
        await stack.start()
        client = await accept_gateway(stack)
        await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        objs, subs = objects(stack, args.ceiling, args.budget, args.small_limit, args.generate)
        for obj in objs:
            await client.apply(obj, field_manager="bench")
        await wait_active(stack, subs)
        rows: list[dict[str, Any]] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=120)) as http:
            for model in MODELS:
                key = await mint(http, stack, "alice", f"served-{model}")
                await warm(http, stack.gateway_url, key, model)
                statuses = await run(http, stack.gateway_url, key, model, args.requests, args.concurrency)
                served = statuses.count(200)
                rows.append({"scenario": "served", "model": model, "requests": args.requests,
                             "served": served, "refused": statuses.count(429),
                             "tokens_used": await charged(http, stack, f"served-{model}", served + 1)})
                print(rows[-1], file=sys.stderr)
            for generate in args.generate:
                for model in MODELS:
                    sub = f"over{generate}-{model}"
                    key = await mint(http, stack, "alice", sub)
                    await warm(http, stack.gateway_url, key, model)
                    statuses = await run(http, stack.gateway_url, key, model, args.concurrency, args.concurrency,
                                         generate)
                    served = statuses.count(200)
                    used = await charged(http, stack, sub, served + 1)
                    rows.append({"scenario": f"overshoot, generates {generate}", "model": model,
                                 "requests": args.concurrency, "served": served, "refused": statuses.count(429),
                                 "tokens_used": used, "overshoot_tokens": max(0, used - args.small_limit)})
                    print(rows[-1], file=sys.stderr)
        return {"machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
                "budget_per_minute": args.budget, "small_limit_per_hour": args.small_limit,
                "ceiling": args.ceiling, "concurrency": args.concurrency, "latency_s": args.latency, "rows": rows}
    finally:
        await stack.stop()
        tmp.cleanup()


def render(result: dict[str, Any]) -> str:
    lines = [f"concurrency {result['concurrency']}, model latency {result['latency_s']}s, 15 tokens a request; "
             f"bounded = maxCompletionTokens {result['ceiling']}",
             "", "| scenario | model | requests | served | 429 | tokens used | overshoot |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        limit = (f"{result['budget_per_minute']}/min" if r["scenario"] == "served"
                 else f"{result['small_limit_per_hour']}/h")
        lines.append(f"| {r['scenario']} ({limit}) | {r['model']} | {r['requests']} | {r['served']} | {r['refused']} | "
                     f"{r['tokens_used']} | {r.get('overshoot_tokens', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--budget", type=int, default=100_000, help="tokens per minute of the served scenario")
    parser.add_argument("--ceiling", type=int, default=256, help="maxCompletionTokens of the bounded model")
    parser.add_argument("--small-limit", type=int, default=20_000, help="tokens per hour of the overshoot scenario")
    parser.add_argument("--generate", type=lambda s: [int(x) for x in s.split(",")], default=[4000, 8000],
                        help="completion tokens the test model generates in the overshoot scenario (capped by "
                        "the request's max_tokens)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the test model takes per answer")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    out = asyncio.run(main(ns))
    print(json.dumps(out, indent=2) if ns.json else render(out))
