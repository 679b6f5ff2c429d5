"""What translating for a Messages provider adds on the request path (issue 38): the gateway's CPU time and
round trip per request, an OpenAI-format provider against a `messages` one, interleaved in one run.

One local stack (control plane, controller, maas-api on SQLite, test model, gateway counting in process) and
two published models on the same test model: `gpt` (`apiFormat: openai-chat`, its OpenAI side) and `claude`
(`apiFormat: messages`, its Anthropic side, built on the `anthropic` package's types). Each round runs, for each
shape (a whole answer, a stream of `--words` words with usage), `--requests` sequential requests to one model
and then to the other (the order alternates by round: A B, B A, ...). Reported per shape: the gateway's CPU
time per request (from /proc) and the p50 round trip for both, their difference, and for streams the
difference per streamed chunk (one chunk per word on both sides). The test model's own cost differs between
its two sides and is not part of the gateway's CPU.

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


def payload(stream: bool, words: int) -> dict[str, Any]:
    text = " ".join(["word"] * words)
    body: dict[str, Any] = {"model": "gpt-x", "messages": [{"role": "user", "content": text}]}
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
            urls = {m: f"{stack.gateway_url}/{NS}/{m}/v1/chat/completions" for m in FORMATS}
            for url in urls.values():
                await until_served(http, url, key)
            for r in range(rounds):
                order = list(FORMATS) if r % 2 == 0 else list(reversed(FORMATS))
                for stream in (False, True):
                    body = payload(stream, words)
                    row: dict[str, Any] = {"round": r + 1, "shape": "stream" if stream else "whole"}
                    for model in order:
                        for _ in range(20):  # warm-up: the auth decision cached, connections open
                            await call(http, urls[model], key, body)
                        before = cpu_seconds(gateway_pid)
                        times = [await call(http, urls[model], key, body) for _ in range(requests)]
                        row[model] = {"cpu_us": (cpu_seconds(gateway_pid) - before) / requests * 1e6,
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
    print(f"\n{'shape':<7} {'round':>5} {'openai cpu µs':>14} {'messages cpu µs':>16} {'added µs':>9} "
          f"{'openai p50 ms':>14} {'messages p50 ms':>16}")
    for row in rows:
        g, c = row["gpt"], row["claude"]
        print(f"{row['shape']:<7} {row['round']:>5} {g['cpu_us']:>14.0f} {c['cpu_us']:>16.0f} "
              f"{c['cpu_us'] - g['cpu_us']:>9.0f} {g['p50_ms']:>14.2f} {c['p50_ms']:>16.2f}")
    for shape in ("whole", "stream"):
        added = [r["claude"]["cpu_us"] - r["gpt"]["cpu_us"] for r in rows if r["shape"] == shape]
        extra = f" ({statistics.median(added) / (args.words + 2):.1f} µs per chunk)" if shape == "stream" else ""
        print(f"{shape}: median added gateway CPU per request {statistics.median(added):.0f} µs{extra}")


if __name__ == "__main__":
    main()
