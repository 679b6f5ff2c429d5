"""Controllers and the manager against the real API server."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from collections import Counter

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import Client, Manager, Metrics, OwnerLabels, Request, Result, run_manager
from maasctl.testenv import ControlPlane

from .helpers import CONFIG_MAP, config_map, eventually, http_get, options, running

pytestmark = pytest.mark.integration


async def test_burst_of_updates_is_coalesced_and_never_concurrent_per_key(kube: k8s.ApiClient, namespace: str) -> None:
    mgr = Manager(kube, options(namespace))
    active: Counter[str] = Counter()
    max_active: Counter[str] = Counter()
    reconciles: Counter[str] = Counter()
    last_seen: dict[str, str] = {}

    async def reconcile(req: Request) -> Result:
        active[req.key] += 1
        max_active[req.key] = max(max_active[req.key], active[req.key])
        reconciles[req.key] += 1
        try:
            # Long enough that updates pile up behind a running reconcile even on a loaded machine (coalescing
            # under 500 reconciles for 1,000 updates needs > 20 patches/s here, where 20 ms needed > 100/s).
            await asyncio.sleep(0.1)
            obj = mgr.cache.get(CONFIG_MAP, req.name, req.namespace)
            if obj is not None:
                last_seen[req.key] = obj["data"]["n"]
        finally:
            active[req.key] -= 1
        return Result.done()

    mgr.controller("burst").for_(CONFIG_MAP).max_concurrent_reconciles(4).complete(reconcile)
    client = Client(kube, metrics=Metrics())
    await client.create(config_map("hot", namespace, {"n": "0"}))
    async with running(mgr):
        await eventually(lambda: mgr.controllers[0].started)
        sem = asyncio.Semaphore(16)

        async def update(i: int) -> None:
            async with sem:
                await client.patch(CONFIG_MAP, "hot", namespace, {"data": {"n": str(i)}})

        await asyncio.gather(*(update(i) for i in range(1, 1001)))
        final = (await client.get(CONFIG_MAP, "hot", namespace))["data"]["n"]
        key = f"{namespace}/hot"
        await eventually(lambda: last_seen.get(key) == final and not active[key], timeout=30)
        assert max_active[key] == 1
        assert reconciles[key] < 500, reconciles[key]


async def test_failing_reconcile_backs_off_and_recovers(kube: k8s.ApiClient, namespace: str) -> None:
    mgr = Manager(kube, options(namespace))
    attempts: list[float] = []
    healthy = asyncio.Event()

    async def reconcile(req: Request) -> Result:
        attempts.append(time.monotonic())
        if not healthy.is_set():
            raise RuntimeError("dependency down")
        return Result.done()

    mgr.controller("flaky").for_(CONFIG_MAP).complete(reconcile)
    await Client(kube).create(config_map("a", namespace))
    async with running(mgr):
        await eventually(lambda: len(attempts) >= 8, timeout=30)
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert gaps[6] > 2 * gaps[1], gaps  # 5 ms doubling: ~10 ms -> ~320 ms
        assert gaps[6] >= 0.3
        healthy.set()
        n = len(attempts)
        reg = mgr.metrics.registry
        await eventually(
            lambda: (
                (
                    reg.get_sample_value(
                        "controller_runtime_reconcile_total", {"controller": "flaky", "result": "success"}
                    )
                    or 0
                )
                >= 1
            ),
            timeout=30,
        )
        assert reg.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "flaky"}) >= n - 1
        await asyncio.sleep(0.5)
        assert len(attempts) == n + 1  # success stops the retries (backoff forgotten)


async def test_owned_children_and_mapped_kinds_enqueue_the_owner(kube: k8s.ApiClient, namespace: str) -> None:
    mgr = Manager(kube, options(namespace))
    seen: list[Request] = []

    async def reconcile(req: Request) -> Result:
        seen.append(req)
        return Result.done()

    (
        mgr.controller("owner")
        .for_(CONFIG_MAP, predicates=[lambda e: e.obj["metadata"]["name"].startswith("parent")])
        .owns(CONFIG_MAP, predicates=[lambda e: e.obj["metadata"]["name"].startswith("child")])
        .owns(CONFIG_MAP, owner_labels=OwnerLabels(name="example.io/owner-name", namespace="example.io/owner-ns"))
        .watches(
            CONFIG_MAP,
            map_to=lambda o: [Request(namespace, v)] if (v := (o.get("data") or {}).get("poke")) else [],
        )
        .complete(reconcile)
    )
    client = Client(kube)
    parent = await client.create(config_map("parent", namespace))
    async with running(mgr):
        await eventually(lambda: Request(namespace, "parent") in seen)
        seen.clear()
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "parent",
            "uid": parent["metadata"]["uid"],
            "controller": True,
        }
        await client.create(config_map("child", namespace, ownerReferences=[ref]))
        await eventually(lambda: Request(namespace, "parent") in seen)
        await client.create(
            config_map("x", namespace, labels={"example.io/owner-name": "far", "example.io/owner-ns": "elsewhere"})
        )
        await eventually(lambda: Request("elsewhere", "far") in seen)
        await client.create(config_map("y", namespace, {"poke": "mapped"}))
        await eventually(lambda: Request(namespace, "mapped") in seen)


async def test_each_controller_logs_when_its_workers_start(kube: k8s.ApiClient, namespace: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """The line a restarted controller's time to work is read off (benchmarks/reference_restart_bench.py): once
    per controller, after its informers synced."""
    mgr = Manager(kube, options(namespace))
    reconciled: list[str] = []

    async def reconcile(req: Request) -> Result:
        reconciled.append(req.name)
        return Result.done()

    mgr.controller("first").for_(CONFIG_MAP).complete(reconcile)
    mgr.controller("second").for_(CONFIG_MAP).complete(reconcile)
    await Client(kube).create(config_map("there-before", namespace))
    with caplog.at_level(logging.INFO, logger="maasctl.runtime.controller"):
        async with running(mgr):
            await eventually(lambda: reconciled.count("there-before") == 2)
    starts = [r for r in caplog.records if r.getMessage() == "starting workers"]
    assert sorted(getattr(r, "controller", None) for r in starts) == ["first", "second"]


async def test_metrics_and_probes(kube: k8s.ApiClient, namespace: str) -> None:
    mgr = Manager(kube, options(namespace, graceful_shutdown_timeout=5))
    release = asyncio.Event()
    in_reconcile = asyncio.Event()

    async def reconcile(req: Request) -> Result:
        if req.name == "slow":
            in_reconcile.set()
            await release.wait()
        return Result.requeue_after(60) if req.name == "later" else Result.done()

    mgr.controller("probe").for_(CONFIG_MAP).complete(reconcile)
    client = Client(kube)
    await client.create(config_map("later", namespace))
    async with running(mgr) as task:
        await eventually(lambda: mgr.health_port is not None)
        assert await http_get(mgr.health_port, "/healthz") == (200, "ok\n")
        await eventually(lambda: mgr.controllers[0].started)
        status, _ = await http_get(mgr.health_port, "/readyz")
        assert status == 200
        await eventually(
            lambda: (
                (
                    mgr.metrics.registry.get_sample_value(
                        "controller_runtime_reconcile_total", {"controller": "probe", "result": "requeue_after"}
                    )
                    or 0
                )
                >= 1
            )
        )
        status, text = await http_get(mgr.metrics_port, "/metrics")
        assert status == 200
        for name in (
            "controller_runtime_reconcile_total",
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_time_seconds_bucket",
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_queue_duration_seconds_bucket",
            "workqueue_work_duration_seconds_bucket",
            "workqueue_retries_total",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
            "rest_client_requests_total",
        ):
            assert f"\n{name}{{" in text, name
        assert 'controller_runtime_reconcile_total{controller="probe",result="requeue_after"} 1.0' in text
        assert 'workqueue_adds_total{controller="probe",name="probe"}' in text
        assert 'rest_client_requests_total{code="200",host=' in text

        # During a graceful shutdown the in-flight reconcile finishes while /readyz reports not ready.
        await client.create(config_map("slow", namespace))
        await asyncio.wait_for(in_reconcile.wait(), 10)
        mgr.stop()
        await eventually(lambda: mgr._stopping)
        status, body = await http_get(mgr.health_port, "/readyz")
        assert status == 500 and "shutting down" in body
        assert not task.done()
        release.set()
        await asyncio.wait_for(task, 10)


async def test_stop_is_bounded_by_graceful_timeout(kube: k8s.ApiClient, namespace: str) -> None:
    mgr = Manager(kube, options(namespace, graceful_shutdown_timeout=1))
    started = asyncio.Event()

    async def stuck(req: Request) -> Result:
        started.set()
        await asyncio.sleep(3600)
        return Result.done()

    mgr.controller("stuck").for_(CONFIG_MAP).complete(stuck)
    await Client(kube).create(config_map("a", namespace))
    task = asyncio.create_task(mgr.run())
    await asyncio.wait_for(started.wait(), 20)
    t0 = time.monotonic()
    mgr.stop()
    await asyncio.wait_for(task, 10)
    assert time.monotonic() - t0 < 5


async def test_run_manager_stops_on_sigterm(control_plane: ControlPlane, namespace: str) -> None:
    managers: list[Manager] = []
    reconciled = asyncio.Event()

    async def reconcile(req: Request) -> Result:
        reconciled.set()
        return Result.done()

    def setup(mgr: Manager) -> None:
        managers.append(mgr)
        mgr.controller("cli").for_(CONFIG_MAP).complete(reconcile)

    task = asyncio.create_task(run_manager(options(namespace), setup, kubeconfig=str(control_plane.kubeconfig)))
    await eventually(lambda: bool(managers) and managers[0].controllers[0].started, timeout=30)
    client = Client(managers[0].raw_client.api)
    await client.create(config_map("a", namespace))
    await asyncio.wait_for(reconciled.wait(), 10)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 10)
