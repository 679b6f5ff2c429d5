"""The payload processor's cost (issue 33): added latency (p50/p99) and CPU per request over gRPC at 1, 16 and 64
concurrent streams, interleaved against the in-process path in the same run.

One local stack with `payload_processor=True`: gateway A plays Envoy + Authorino + Limitador and hands the
payload stages to the `maasctl payload-processor` process over ext_proc (two streams per request: pre and
post); gateway B (`add_gateway`, same policies, same maas-api) runs every stage in process. The test model is
published with an unlimited subscription and a key is minted. For each client count C and each round, C
closed-loop clients send chat completions for `--seconds` through B, then through A (the order alternates per
round, so drift in the machine's load falls on both). "added" is A's p50 (p99) minus B's at the same C; CPU per
request is B's gateway process, and A's gateway (the part Envoy does in a cluster, here in Python: the ext_proc
client included) and the processor process, apart (/proc).

    .venv/bin/python benchmarks/extproc_bench.py [--clients 1,16,64] [--seconds 5] [--rounds 2]
        [--model-latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from gateway_load_bench import cpu_seconds, load, pid_of
from kubernetes_asyncio import client as k8s
from overshoot_bench import NS, SETTINGS, accept_gateway, mint, model_objects, pct, served_once, wait_active

from maasctl.localstack import LocalStack, StackOptions


async def run(clients: list[int], seconds: float, rounds: int, model_latency: float) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory(prefix="maasctl-extproc-")
    latency = {"model_latency": model_latency} if model_latency > 0 else {}
    stack = LocalStack(StackOptions(directory=Path(tmp.name), settings=SETTINGS, payload_processor=True,
                                    guardrails=False, **latency))
    try:
        await stack.start()
        inproc_url = await stack.add_gateway("gateway-inprocess")
        pids = {"via": pid_of(stack, "gateway"), "processor": pid_of(stack, "payload-processor"),
                "inproc": pid_of(stack, "gateway-inprocess")}
        client = await accept_gateway(stack)
        await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        for obj in model_objects(stack, stack.settings.subscription_namespace, []):
            await client.apply(obj, field_manager="bench")
        await wait_active(stack, ["unlimited"])
        samples: dict[tuple[int, str], list[float]] = {}
        cpu: dict[tuple[int, str], float] = {}
        counts: dict[tuple[int, str], int] = {}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
            key = await mint(http, stack, "bob", "unlimited")
            auth = {"Authorization": f"Bearer {key}"}
            urls = {"via": stack.gateway_url, "inproc": inproc_url}
            for base in urls.values():
                await served_once(http, base, key)
                await load(http, f"{base}/{NS}/gpt/v1/chat/completions", auth, 4, 1.0)  # warm-up
            for r in range(rounds):
                for c in clients:
                    for path in (("inproc", "via") if r % 2 == 0 else ("via", "inproc")):
                        url = f"{urls[path]}/{NS}/gpt/v1/chat/completions"
                        await load(http, url, auth, min(c, 4), 0.3)  # the key's decision cached again
                        procs = {"inproc": pids["inproc"]} if path == "inproc" else \
                            {"via": pids["via"], "processor": pids["processor"]}
                        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
                        got, _ = await load(http, url, auth, c, seconds)
                        for name, pid in procs.items():
                            cpu[(c, name)] = cpu.get((c, name), 0.0) + cpu_seconds(pid) - before[name]
                        samples.setdefault((c, path), []).extend(got)
                        counts[(c, path)] = counts.get((c, path), 0) + len(got)
        rows = []
        for c in clients:
            i, v = samples[(c, "inproc")], samples[(c, "via")]
            rows.append({"clients": c, "inproc_p50": statistics.median(i), "inproc_p99": pct(i, 0.99),
                         "via_p50": statistics.median(v), "via_p99": pct(v, 0.99),
                         "inproc_cpu_us": cpu[(c, "inproc")] / counts[(c, "inproc")] * 1e6,
                         "via_cpu_us": cpu[(c, "via")] / counts[(c, "via")] * 1e6,
                         "processor_cpu_us": cpu[(c, "processor")] / counts[(c, "via")] * 1e6,
                         "requests": counts[(c, "inproc")] + counts[(c, "via")]})
        return {"rows": rows}
    except Exception:
        for name in ("gateway", "payload-processor", "gateway-inprocess"):
            log = stack.directory / f"{name}.log"
            if log.exists():
                warnings = [line for line in log.read_text(errors="replace").splitlines()
                            if '"warning"' in line or '"error"' in line]
                print(f"--- {name}: {len(warnings)} warnings/errors, last ones:", *warnings[-5:], sep="\n")
        raise
    finally:
        await stack.stop()
        tmp.cleanup()


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"{platform.processor() or platform.machine()}, {args.rounds} interleaved rounds x {args.seconds}s, "
             f"model latency {args.model_latency}s", "",
             "| streams | in-process p50 / p99 ms | via processor p50 / p99 ms | added p50 / p99 ms | "
             "CPU/request µs: in-process gateway / front gateway (Envoy's part) + processor |",
             "|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['clients']} | {row['inproc_p50']:.1f} / {row['inproc_p99']:.1f} | "
                     f"{row['via_p50']:.1f} / {row['via_p99']:.1f} | "
                     f"{row['via_p50'] - row['inproc_p50']:.1f} / {row['via_p99'] - row['inproc_p99']:.1f} | "
                     f"{row['inproc_cpu_us']:.0f} / {row['via_cpu_us']:.0f} + {row['processor_cpu_us']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model-latency", type=float, default=0.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    result = asyncio.run(run([int(c) for c in args.clients.split(",")], args.seconds, args.rounds,
                             args.model_latency))
    print(json.dumps(result) if args.json else render(result, args))
    print(f"\n(total {time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
