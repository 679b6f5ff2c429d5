"""What translation adds on the request path (issue 38): the gateway's CPU time and round trip per request, an
OpenAI client on an OpenAI provider (the baseline) against an OpenAI client on a `messages` provider and an
Anthropic client at the Messages door of the OpenAI provider, interleaved in one run.

One local stack (control plane, controller, maas-api on SQLite, test model, gateway counting in process) and
two published models on the same test model: `gpt` (`apiFormat: openai-chat`, its OpenAI side) and `claude`
(`apiFormat: messages`, its Anthropic side, built on the `anthropic` package's types); the door is `gpt`'s
`/v1/messages`. Each round runs, for each shape (a whole answer, a stream of `--words` words with usage),
`--requests` sequential requests of each variant (the order rotates by round). Reported per shape: the
gateway's CPU time per request (from /proc) and the p50 round trip of each, the difference to the baseline,
and for streams the difference per streamed chunk (one chunk per word). The test model's own cost differs
between its two sides and is not part of the gateway's CPU.

    .venv/bin/python benchmarks/provider_format_bench.py [--rounds 3] [--requests 300] [--words 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from gateway_load_bench import cpu_seconds, pid_of
from kubernetes_asyncio import client as k8s
from overshoot_bench import MAAS, NS, SETTINGS, accept_gateway, mint, wait_active

from maasctl.localstack import LocalStack, StackOptions

FORMATS = {"gpt": "openai-chat", "claude": "messages"}
VARIANTS = {"openai": ("gpt", "chat/completions"), "provider": ("claude", "chat/completions"),
            "door": ("gpt", "messages")}


def objects(stack: LocalStack, sub_ns: str) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": NS},
         "stringData": {"api-key": stack.options.upstream_key}}]
    for name, api_format in FORMATS.items():
        objs += [
            {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": name, "namespace": NS},
             "spec": {"provider": "anthropic" if api_format == "messages" else "openai", "apiFormat": api_format,
                      "endpoint": f"{stack.model_url}/v1", "targetModel": "gpt-x",
                      "credentialRef": {"name": "provider-key"}}},
            {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": NS},
             "spec": {"modelRef": {"kind": "ExternalModel", "name": name}}}]
    refs = [{"name": name, "namespace": NS} for name in FORMATS]
    objs += [
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": "bench", "namespace": sub_ns},
         "spec": {"modelRefs": refs, "subjects": {"users": ["bob"]}}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": "unlimited", "namespace": sub_ns},
         "spec": {"owner": {"users": ["bob"]}, "modelRefs": [{**r, "unlimited": True} for r in refs]}}]
    return objs


def payload(stream: bool, words: int, door: bool = False) -> dict[str, Any]:
    text = " ".join(["word"] * words)
    body: dict[str, Any] = {"model": "gpt-x", "messages": [{"role": "user", "content": text}]}
    if door:
        return body | {"max_tokens": 256} | ({"stream": True} if stream else {})
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


async def call(http: aiohttp.ClientSession, url: str, key: str, body: dict[str, Any]) -> float:
    sent = time.perf_counter()
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
        data = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status} {data[:300]!r}")
    return (time.perf_counter() - sent) * 1000


async def until_served(http: aiohttp.ClientSession, url: str, key: str) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            await call(http, url, key, payload(False, 1))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def run(rounds: int, requests: int, words: int) -> list[dict[str, Any]]:
    tmp = tempfile.TemporaryDirectory(prefix="maasctl-formats-")
    stack = LocalStack(StackOptions(directory=Path(tmp.name), settings=SETTINGS))
    rows: list[dict[str, Any]] = []
    try:
        await stack.start()
        gateway_pid = pid_of(stack, "gateway")
        client = await accept_gateway(stack)
        await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        for obj in objects(stack, stack.settings.subscription_namespace):
            await client.apply(obj, field_manager="bench")
        await wait_active(stack, ["unlimited"])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            key = await mint(http, stack, "bob", "unlimited")
            urls = {v: f"{stack.gateway_url}/{NS}/{m}/v1/{p}" for v, (m, p) in VARIANTS.items()}
            for model in FORMATS:
                await until_served(http, f"{stack.gateway_url}/{NS}/{model}/v1/chat/completions", key)
            for r in range(rounds):
                order = list(VARIANTS)[r % 3:] + list(VARIANTS)[:r % 3]
                for stream in (False, True):
                    row: dict[str, Any] = {"round": r + 1, "shape": "stream" if stream else "whole"}
                    for variant in order:
                        body = payload(stream, words, door=variant == "door")
                        for _ in range(20):  # warm-up: the auth decision cached, connections open
                            await call(http, urls[variant], key, body)
                        before = cpu_seconds(gateway_pid)
                        times = [await call(http, urls[variant], key, body) for _ in range(requests)]
                        row[variant] = {"cpu_us": (cpu_seconds(gateway_pid) - before) / requests * 1e6,
                                        "p50_ms": statistics.median(times)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        await stack.stop()
        tmp.cleanup()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--words", type=int, default=50, help="words in the prompt: the test model echoes them")
    args = parser.parse_args()
    rows = asyncio.run(run(args.rounds, args.requests, args.words))
    print(f"\n{'shape':<7} {'round':>5} " + " ".join(f"{v + ' cpu µs':>17} {v + ' p50 ms':>17}" for v in VARIANTS))
    for row in rows:
        cells = " ".join(f"{row[v]['cpu_us']:>17.0f} {row[v]['p50_ms']:>17.2f}" for v in VARIANTS)
        print(f"{row['shape']:<7} {row['round']:>5} {cells}")
    for shape in ("whole", "stream"):
        for variant in ("provider", "door"):
            added = [r[variant]["cpu_us"] - r["openai"]["cpu_us"] for r in rows if r["shape"] == shape]
            p50 = [r[variant]["p50_ms"] - r["openai"]["p50_ms"] for r in rows if r["shape"] == shape]
            extra = f", {statistics.median(added) / (args.words + 2):.1f} µs per chunk" if shape == "stream" else ""
            print(f"{shape} {variant}: median added gateway CPU {statistics.median(added):.0f} µs per request"
                  f"{extra}; p50 {statistics.median(p50):+.2f} ms")


if __name__ == "__main__":
    main()
