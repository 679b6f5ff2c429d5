"""Gateway under concurrent load (issue 23): requests/s, p50 and p99 at 1, 16 and 64 clients.

Starts the whole local stack (control plane, controller, maas-api on SQLite, test model, one gateway counting
tokens in process), publishes the test model with an unlimited subscription and mints a key. For each client
count C: C closed-loop clients send chat completions for `--seconds` to the test model directly, then through
the gateway (API key auth, subscription selection by maas-api, reservation and settlement, usage record to
maas-api). Latency is each request's round trip at the client; "added" is the gateway's p50 (p99) minus the
direct p50 (p99) at the same C. The key's cached auth decision expires while the direct run goes on, so before
each gateway run one request recomputes it (reported as "first request after idle") and a short warm-up
follows: the measured run is the steady state. Usage POSTs/s are the gateway's POSTs to maas-api's usage
endpoint during the gateway runs, counted from maas-api's access log.

    .venv/bin/python benchmarks/gateway_load_bench.py [--clients 1,16,64] [--seconds 8] [--rounds 1]
        [--compare /tmp/base/src] [--model-latency 0.2]

``--model-latency S`` makes the test model take S seconds per completion, as a real model's generation does:
with the default (an instant answer) 16 or 64 closed-loop clients saturate the machine's cores with the test
model, the gateway, maas-api and the load generator, so "added" then measures CPU queueing as much as the
gateway; with a realistic latency the same clients make a request rate the machine can serve and "added" is
the gateway's own overhead under that concurrency. (The compared code must know the option.)

``--gateway-core N`` gives the gateway core N to itself: the benchmark pins itself (and so every process of the
stack it starts) to the other cores and the gateway to N, as a deployment gives the gateway pod its own CPU.
"added" is then the gateway's own overhead, not its wait for a core shared with the model and the load
generator. Each row also reports the CPU time per request of the gateway (during the gateway run) and of the
test model and of the load generator (during the direct run), read from /proc.

``--stagger`` (with ``--model-latency``) starts client i of C i/C model latencies after the first: without it
all C clients send at the same instant and, the model answering each in the same time, stay synchronized, so
every process on the path receives bursts of C requests at once, and the last of a burst waits for the other
C - 1 to be processed (for the gateway: C x its CPU time per request, on one core).

``--workers 1,2`` measures the gateway with each number of worker processes (`maasctl gateway --workers N`),
interleaved like ``--compare``: every round runs each count, in alternating order. The gateway's counters are then
in a real Redis server for every count (more than one worker needs it), so the counts differ only in their
processes; the gateway's CPU is the sum over its parent and workers.

``--fast-model`` puts the model behind the gateway on a minimal HTTP server (a canned chat completion with its
usage, ~0.1 ms of CPU a request, in a process of its own) instead of the test model (~1 ms): on two cores the
test model, the load generator and the gateway together saturate the machine before one gateway process does,
so only with a cheap model does the gateway's own capacity decide the requests per second. With
``--model-latency S`` it answers each request S seconds after reading it, its CPU per request unchanged: a model
that takes a real model's time on hardware of its own, so the direct run's percentiles stay at S and "added" is
not the difference of two percentiles of a model starved of CPU.

``--wrk`` sends the load with wrk (Debian's ``wrk``, one thread, a Lua script for the POST) instead of this
process's aiohttp clients: aiohttp spends ~150 µs of CPU a request, wrk ~10, so on two cores the second core is
left to the gateway's second worker rather than to the load generator. Latencies are then wrk's percentiles
(its p50 and p99); any answer but 2xx ends the benchmark.

``--compare DIR`` runs every other round with ``PYTHONPATH=DIR`` (e.g. ``git archive <commit> | tar -x -C
/tmp/base`` and ``/tmp/base/src``, with ``MAASCTL_THIRD_PARTY_CRDS`` set; the stack's processes inherit it),
so old and new code are measured interleaved on the same machine. Each round runs in its own process; the
load average at its start is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from overshoot_bench import (
    NS,
    PAYLOAD,
    SETTINGS,
    accept_gateway,
    mint,
    model_objects,
    pct,
    request_ok,
    served_once,
    wait_active,
)
from reconcile_scale_bench import proc_cpu as cpu_seconds  # CPU seconds of a process, from /proc

from maasctl.localstack import LocalStack, StackOptions
from maasctl.testenv.controlplane import free_port
from maasctl.testenv.redis import start_redis


async def load(http: aiohttp.ClientSession, url: str, headers: dict[str, str], clients: int,
               seconds: float, stagger: float = 0.0) -> tuple[list[float], float]:
    """Round trips (ms) of `clients` closed-loop clients for `seconds`, and the requests per second. With
    `stagger`, client i sends its first request i/clients x `stagger` seconds after the start."""
    out: list[float] = []
    start = time.perf_counter()

    async def client(i: int) -> None:
        await asyncio.sleep(i * stagger / clients)
        while time.perf_counter() - start < seconds:
            sent = time.perf_counter()
            await request_ok(http, url, headers)
            out.append((time.perf_counter() - sent) * 1000)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return out, len(out) / (time.perf_counter() - start)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk_ms(text: str) -> float:
    """A wrk duration ("635.00us", "1.23ms", "2.00s") in milliseconds."""
    match = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def parse_wrk(out: str) -> dict[str, float]:
    """p50, p99 (ms), requests and req/s from wrk's --latency report; a non-2xx answer is a failed run."""
    if "Non-2xx or 3xx responses" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw failed requests:\n{out}")
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    done = re.search(r"^\s+(\d+) requests in", out, re.M)
    rate = re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M)
    if len(percentiles) != 2 or done is None or rate is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    return {"p50": wrk_ms(percentiles["50"]), "p99": wrk_ms(percentiles["99"]), "requests": float(done[1]),
            "rps": float(rate[1])}


async def load_wrk(url: str, headers: dict[str, str], clients: int, seconds: float) -> dict[str, float]:
    """wrk (one thread, `clients` connections) POSTing the chat completion for `seconds`; its report and CPU."""
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(PAYLOAD))}",
             'wrk.headers["Content-Type"] = "application/json"',
             *(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items())]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lines) + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = await asyncio.create_subprocess_exec(
            "wrk", "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency", "-s", script.name, url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
    finally:
        os.unlink(script.name)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"wrk failed: {out.decode(errors='replace')}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return parse_wrk(out.decode(errors="replace")) | {"load_cpu": cpu}


async def measure(http: aiohttp.ClientSession, url: str, headers: dict[str, str], clients: int, seconds: float,
                  stagger: float, use_wrk: bool) -> dict[str, float]:
    """One load run's p50, p99 (ms), requests, req/s and the load generator's CPU seconds."""
    if use_wrk:
        return await load_wrk(url, headers, clients, seconds)
    cpu = time.process_time()
    trips, rate = await load(http, url, headers, clients, seconds, stagger)
    return {"p50": statistics.median(trips), "p99": pct(trips, 0.99), "requests": float(len(trips)), "rps": rate,
            "load_cpu": time.process_time() - cpu}


def tree(pid: int) -> list[int]:
    """Process `pid` and its live children (a gateway's worker processes)."""
    return [pid, *(int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                   for c in (task / "children").read_text().split())]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in tree(pid))


def tree_rss_mb(pid: int) -> float:
    """Resident memory of process `pid` and its children (VmRSS), MiB."""
    return sum(int(line.split()[1]) for p in tree(pid) for line in Path(f"/proc/{p}/status").read_text().splitlines()
               if line.startswith("VmRSS:")) / 1024


def pid_of(stack: LocalStack, name: str) -> int:
    popen = stack.processes[name].popen
    assert popen is not None
    return popen.pid


def usage_posts(stack: LocalStack) -> int:
    """POSTs to maas-api's usage endpoint so far (its access log)."""
    log = stack.directory / "maas-api.log"
    return sum(1 for line in log.read_text(errors="replace").splitlines() if "/internal/v1/usage" in line) \
        if log.exists() else 0


_CANNED = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-x",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
_ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
           + str(len(_CANNED)).encode() + b"\r\n\r\n" + _CANNED)


class _CannedModel(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every request (its body read by content-length) gets the canned completion,
    `latency` seconds after it was read (in order: every answer waits the same time)."""

    latency = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            if self.latency > 0:
                asyncio.get_running_loop().call_later(self.latency, self._answer)
            else:
                self._answer()

    def _answer(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(_ANSWER)


def serve_fast_model(port: int, latency: float) -> None:
    import uvloop

    _CannedModel.latency = latency

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_CannedModel, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


async def run(clients: list[int], seconds: float, model_latency: float, gateway_core: int | None,
              staggered: bool, workers: int | None = None, fast_model: bool = False,
              use_wrk: bool = False) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory(prefix="maasctl-gwload-")
    redis = start_redis() if workers is not None else None
    pooled = {"workers": workers, "redis_url": redis.url} if redis is not None and workers is not None else {}
    stagger = model_latency if staggered else 0.0
    if gateway_core is not None:  # children inherit the affinity: the whole stack leaves the gateway's core free
        os.sched_setaffinity(0, os.sched_getaffinity(0) - {gateway_core})
    latency = {"model_latency": model_latency} if model_latency > 0 and not fast_model else {}
    stack = LocalStack(StackOptions(directory=Path(tmp.name), settings=SETTINGS, **latency, **pooled))
    fast = None
    try:
        await stack.start()
        gateway_pid, model_pid = pid_of(stack, "gateway"), pid_of(stack, "testmodel")
        model_url = stack.model_url
        if fast_model:
            port = free_port()
            fast = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve-fast-model", str(port),
                                                        "--model-latency", str(model_latency))
            model_url, model_pid = f"http://127.0.0.1:{port}", fast.pid
        if gateway_core is not None:
            os.sched_setaffinity(gateway_pid, {gateway_core})
        client = await accept_gateway(stack)
        await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        for obj in model_objects(stack, stack.settings.subscription_namespace, []):
            if obj["kind"] == "ExternalModel":
                obj["spec"]["endpoint"] = f"{model_url}/v1"
            await client.apply(obj, field_manager="bench")
        await wait_active(stack, ["unlimited"])
        rows = []
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
            key = await mint(http, stack, "bob", "unlimited")
            gateway = f"{stack.gateway_url}/{NS}/gpt/v1/chat/completions"
            await served_once(http, stack.gateway_url, key)
            direct = (f"{model_url}/v1/chat/completions",
                      {"Authorization": f"Bearer {stack.options.upstream_key}"})
            await load(http, gateway, {"Authorization": f"Bearer {key}"}, 4, 1.0)  # warm-up
            auth = {"Authorization": f"Bearer {key}"}
            for c in clients:
                model_cpu = cpu_seconds(model_pid)
                d = await measure(http, *direct, c, seconds, stagger, use_wrk)
                model_cpu = cpu_seconds(model_pid) - model_cpu
                # the key's auth decision expired during the direct run: its first request computes it again
                # (reported apart), then a short warm-up so the measured run is the steady state under load
                sent = time.perf_counter()
                await request_ok(http, gateway, auth)
                first = (time.perf_counter() - sent) * 1000
                await load(http, gateway, auth, min(c, 4), 0.3)
                posts, gateway_cpu = usage_posts(stack), tree_cpu_seconds(gateway_pid)
                g = await measure(http, gateway, auth, c, seconds, stagger, use_wrk)
                gateway_cpu = tree_cpu_seconds(gateway_pid) - gateway_cpu
                await asyncio.sleep(0.5)
                posts = usage_posts(stack) - posts
                rows.append({"clients": c, "direct_rps": d["rps"], "direct_p50": d["p50"], "direct_p99": d["p99"],
                             "rps": g["rps"], "p50": g["p50"], "p99": g["p99"],
                             "usage_posts_per_s": posts / seconds, "requests": g["requests"],
                             "first_after_idle_ms": first, "gateway_cpu_us": gateway_cpu / g["requests"] * 1e6,
                             "model_cpu_us": model_cpu / d["requests"] * 1e6,
                             "load_cpu_us": d["load_cpu"] / d["requests"] * 1e6,
                             "gateway_rss_mb": tree_rss_mb(gateway_pid)})
        return {"rows": rows}
    finally:
        if fast is not None:
            fast.kill()
            await fast.wait()
        await stack.stop()
        if redis is not None:
            redis.stop()
        tmp.cleanup()


def one_round(args: argparse.Namespace, pythonpath: str | None, workers: int | None = None) -> dict[str, Any]:
    for attempt in range(3):  # on a machine shared with other work a stack may not start in time: try again
        try:
            return _one_round(args, pythonpath, workers)
        except RuntimeError as exc:
            if attempt == 2 or "not ready" not in str(exc):
                raise
            print(f"round failed to start ({str(exc).splitlines()[-1][:200]}), once more", file=sys.stderr)
    raise AssertionError


def _one_round(args: argparse.Namespace, pythonpath: str | None, workers: int | None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out = subprocess.run([sys.executable, __file__, "--one", "--clients", ",".join(map(str, args.clients)),
                          "--seconds", str(args.seconds), "--model-latency", str(args.model_latency),
                          *(["--gateway-core", str(args.gateway_core)] if args.gateway_core is not None else []),
                          *(["--stagger"] if args.stagger else []),
                          *(["--workers", str(workers)] if workers is not None else []),
                          *(["--fast-model"] if args.fast_model else []),
                          *(["--wrk"] if args.wrk else [])],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"round failed ({pythonpath or 'this checkout'}):\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1])) | {"load": started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64])
    parser.add_argument("--seconds", type=float, default=8.0, help="duration of each load run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare", help="PYTHONPATH of the code to compare with (interleaved)")
    parser.add_argument("--model-latency", type=float, default=0.0, help="seconds the test model takes per answer")
    parser.add_argument("--gateway-core", type=int, help="pin the gateway to this core, everything else elsewhere")
    parser.add_argument("--stagger", action="store_true",
                        help="spread the clients' first requests over the model latency (no synchronized bursts)")
    parser.add_argument("--workers", help="worker counts of the gateway to interleave, e.g. 1,2 (Redis counters)")
    parser.add_argument("--fast-model", action="store_true", help="a minimal model server instead of the test model")
    parser.add_argument("--wrk", action="store_true", help="send the load with wrk instead of aiohttp clients")
    parser.add_argument("--serve-fast-model", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fast_model:
        serve_fast_model(args.serve_fast_model, args.model_latency)
        return
    if args.one:
        workers = int(args.workers) if args.workers else None
        result = asyncio.run(run(args.clients, args.seconds, args.model_latency, args.gateway_core, args.stagger,
                                 workers, args.fast_model, args.wrk))
        print(json.dumps(result), flush=True)
        return
    versions: list[tuple[str, str | None, int | None]] = [("this checkout", None, None)]
    if args.compare:
        versions.append(("compared", args.compare, None))
    if args.workers:
        versions = [(f"{n} worker{'s' if n > 1 else ''}", None, n) for n in map(int, args.workers.split(","))]
    print("| version | round | load at start | clients | direct req/s | direct p50 / p99 (ms) | gateway req/s | "
          "gateway p50 / p99 (ms) | added p50 / p99 (ms) | usage POSTs/s | first request after idle (ms) | "
          "CPU per request: gateway / model / load generator (µs) | gateway RSS (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rnd in range(args.rounds):
        for name, path, workers in (versions if rnd % 2 == 0 else versions[::-1]):
            r = one_round(args, path, workers)
            for row in r["rows"]:
                print(f"| {name} | {rnd + 1} | {r['load']} | {row['clients']} | {row['direct_rps']:.0f} | "
                      f"{row['direct_p50']:.2f} / {row['direct_p99']:.2f} | {row['rps']:.0f} | "
                      f"{row['p50']:.2f} / {row['p99']:.2f} | {row['p50'] - row['direct_p50']:.2f} / "
                      f"{row['p99'] - row['direct_p99']:.2f} | {row['usage_posts_per_s']:.1f} | "
                      f"{row.get('first_after_idle_ms', float('nan')):.1f} | "
                      f"{row.get('gateway_cpu_us', float('nan')):.0f} / {row.get('model_cpu_us', float('nan')):.0f} / "
                      f"{row.get('load_cpu_us', float('nan')):.0f} | {row.get('gateway_rss_mb', float('nan')):.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
