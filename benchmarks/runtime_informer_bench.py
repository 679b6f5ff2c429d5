"""Benchmark the runtime informer: memory per cached object and event-to-reconcile latency.

Run: ``.venv/bin/python benchmarks/runtime_informer_bench.py [--objects 10000] [--samples 300]``.
It starts its own local control plane (``maasctl.testenv``), so it needs the built testenv binary.

Method:
  * memory: create N ConfigMaps (about 1 KiB of data, 3 labels, 1 annotation each), then in this process
    measure RSS before and after an informer lists them and syncs (managedFields stripped, objects frozen).
    The delta divided by N is the per-object cost above baseline. A second figure uses tracemalloc on a
    second informer to count only live Python allocations (RSS also includes allocator slack).
  * latency: a manager with one controller on an otherwise idle namespace; one merge patch at a time;
    latency is from just before the PATCH is sent to the start of the reconcile of that key.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import time
import tracemalloc
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from maasctl.runtime import Client, GroupVersionKind, Informer, Manager, ManagerOptions, Request, Result
from maasctl.runtime.informer import strip_managed_fields
from maasctl.testenv import ControlPlane

CONFIG_MAP = GroupVersionKind("", "v1", "ConfigMap")
PAGE = 4096


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def config_map(name: str, namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "bench", "bench/index": str(i % 100), "tier": "cache"},
            "annotations": {"bench/description": "informer memory benchmark object"},
        },
        "data": {f"key-{k}": f"value-{i}-{k}-" + "x" * 80 for k in range(10)},
    }


async def create_many(client: Client, namespace: str, n: int) -> None:
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await client.create(config_map(f"cm-{i:05d}", namespace, i))

    await asyncio.gather(*(one(i) for i in range(n)))


async def memory(client: Client, namespace: str, n: int) -> dict[str, float]:
    gc.collect()
    before = rss_bytes()
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,), transform=strip_managed_fields())
    task = asyncio.create_task(inf.run())
    await inf.wait_for_sync(600)
    assert len(inf.store) == n, len(inf.store)
    gc.collect()
    after = rss_bytes()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    inf2 = Informer(client, CONFIG_MAP, namespaces=(namespace,), transform=strip_managed_fields())
    task2 = asyncio.create_task(inf2.run())
    await inf2.wait_for_sync(600)
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    task2.cancel()
    await asyncio.gather(task2, return_exceptions=True)
    del inf, inf2
    return {"rss_per_object_kib": (after - before) / n / 1024, "traced_per_object_kib": (traced - base) / n / 1024}


async def latency(api: k8s.ApiClient, client: Client, namespace: str, samples: int) -> dict[str, float]:
    mgr = Manager(
        api,
        ManagerOptions(namespaces=(namespace,), metrics_bind_address="0", health_probe_bind_address="0"),
    )
    started: dict[str, asyncio.Future[float]] = {}

    async def reconcile(req: Request) -> Result:
        fut = started.get(req.name)
        if fut is not None and not fut.done():
            fut.set_result(time.perf_counter())
        return Result.done()

    mgr.controller("bench").for_(CONFIG_MAP).complete(reconcile)
    await client.create(config_map("hot", namespace, 0))
    run = asyncio.create_task(mgr.run())
    for _ in range(1200):  # wait until the controller runs and its queue is idle
        if mgr.controllers[0].started and len(mgr.controllers[0].queue) == 0:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    lat: list[float] = []
    rtt: list[float] = []
    loop = asyncio.get_running_loop()
    for i in range(samples):
        fut: asyncio.Future[float] = loop.create_future()
        started["hot"] = fut
        t0 = time.perf_counter()
        await client.patch(CONFIG_MAP, "hot", namespace, {"data": {"n": str(i)}})
        rtt.append(time.perf_counter() - t0)
        lat.append(await asyncio.wait_for(fut, 10) - t0)
        await asyncio.sleep(0.01)
    mgr.stop()
    await run
    ms = [x * 1000 for x in lat]
    return {
        "latency_p50_ms": pct(ms, 50),
        "latency_p99_ms": pct(ms, 99),
        "latency_max_ms": max(ms),
        "latency_mean_ms": statistics.fmean(ms),
        "patch_rtt_p50_ms": pct([x * 1000 for x in rtt], 50),
    }


async def main_async(args: argparse.Namespace) -> None:
    cp = ControlPlane()
    cp.start()
    try:
        configuration = k8s.Configuration()
        await k8s_config.load_kube_config(config_file=str(cp.kubeconfig), client_configuration=configuration)
        async with k8s.ApiClient(configuration) as api:
            client = Client(api)
            for ns in ("bench-memory", "bench-latency"):
                await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            t0 = time.perf_counter()
            await create_many(client, "bench-memory", args.objects)
            created_s = time.perf_counter() - t0
            sample = await client.get(CONFIG_MAP, "cm-00000", "bench-memory")
            sample.get("metadata", {}).pop("managedFields", None)
            size = len(json.dumps(sample))
            mem = await memory(client, "bench-memory", args.objects)
            lat = await latency(api, client, "bench-latency", args.samples)
    finally:
        cp.stop()
    machine = platform.processor() or platform.machine()
    print(f"machine: {machine}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"objects: {args.objects} ConfigMaps of ~{size} bytes JSON each (created in {created_s:.1f}s)")
    print(f"memory per cached object (RSS delta):        {mem['rss_per_object_kib']:.2f} KiB")
    print(f"memory per cached object (tracemalloc live): {mem['traced_per_object_kib']:.2f} KiB")
    print(f"event-to-reconcile latency over {args.samples} idle-queue updates:")
    for k, v in lat.items():
        print(f"  {k}: {v:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
