"""Two (three) managers with leader election on a real Lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import (
    Client,
    LeaderElectionLost,
    LeaderElectionOptions,
    Manager,
    Metrics,
    Request,
    Result,
)
from maasctl.runtime.leaderelection import LEASE as LEASE_KIND

from .helpers import CONFIG_MAP, config_map, eventually, options

pytestmark = pytest.mark.integration

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5


def _manager(kube: k8s.ApiClient, namespace: str, identity: str, reconciles: dict[str, int]) -> Manager:
    le = LeaderElectionOptions(
        enabled=True,
        namespace=namespace,
        name="test-leader",
        identity=identity,
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
    )
    mgr = Manager(kube, options(namespace, leader_election=le, field_manager=f"ctl-{identity}"))
    reconciles[identity] = 0

    async def reconcile(req: Request) -> Result:
        reconciles[identity] += 1
        desired = config_map(f"out-{req.name}", namespace, {"writer": identity})
        await mgr.client.apply(desired, field_manager="ctl")
        return Result.done()

    mgr.controller("le").for_(CONFIG_MAP, predicates=[lambda e: e.obj["metadata"]["name"].startswith("in-")]).complete(
        reconcile
    )
    return mgr


async def _stop(mgr: Manager, task: asyncio.Task[None]) -> None:
    mgr.stop()
    await asyncio.gather(asyncio.wait_for(task, 20), return_exceptions=True)


async def test_only_leader_reconciles_and_handover_after_leader_dies(kube: k8s.ApiClient, namespace: str) -> None:
    client = Client(kube, metrics=Metrics())
    reconciles: dict[str, int] = {}
    a = _manager(kube, namespace, "a", reconciles)
    b = _manager(kube, namespace, "b", reconciles)
    task_a = asyncio.create_task(a.run())
    await eventually(lambda: a.elected, timeout=20)
    task_b = asyncio.create_task(b.run())
    try:
        await eventually(lambda: b._synced, timeout=20)
        await client.create(config_map("in-1", namespace))

        async def written_by_a() -> bool:
            try:
                return (await client.get(CONFIG_MAP, "out-in-1", namespace))["data"]["writer"] == "a"
            except Exception:
                return False

        await eventually(written_by_a, timeout=20)
        await asyncio.sleep(1)
        assert reconciles["b"] == 0 and not b.elected
        assert b.controllers[0].started is False

        # "Kill" the leader's connection to the lease: it can no longer renew.
        async def unreachable() -> bool:
            return False

        a.elector._try_acquire_or_renew = unreachable  # type: ignore[union-attr,method-assign]
        t0 = time.monotonic()
        stop_churn = asyncio.Event()

        async def churn() -> None:
            i = 2
            while not stop_churn.is_set():
                await client.create(config_map(f"in-{i}", namespace))
                i += 1
                await asyncio.sleep(0.1)

        churner = asyncio.create_task(churn())
        await eventually(lambda: b.elected, timeout=LEASE + RENEW + 5)
        handover = time.monotonic() - t0
        takeover_rv = int((await client.list(CONFIG_MAP, namespace)).resource_version)
        assert handover < LEASE + 2 * RETRY * 1.2 + 1.0, handover
        with pytest.raises(LeaderElectionLost):
            await asyncio.wait_for(task_a, 10)
        assert not a.elected
        await asyncio.sleep(1.5)
        stop_churn.set()
        await churner
        await eventually(lambda: reconciles["b"] > 0)

        # Nothing the old leader did reached the server after the new leader took over.
        outs = [o for o in (await client.list(CONFIG_MAP, namespace)).items if o["metadata"]["name"].startswith("out-")]
        late = [o for o in outs if int(o["metadata"]["resourceVersion"]) > takeover_rv]
        assert late and all(o["data"]["writer"] == "b" for o in late)
    finally:
        await _stop(b, task_b)
        if not task_a.done():
            await _stop(a, task_a)


async def test_graceful_shutdown_releases_the_lease(kube: k8s.ApiClient, namespace: str) -> None:
    reconciles: dict[str, int] = {}
    a = _manager(kube, namespace, "a", reconciles)
    b = _manager(kube, namespace, "b", reconciles)
    task_a = asyncio.create_task(a.run())
    await eventually(lambda: a.elected, timeout=20)
    task_b = asyncio.create_task(b.run())
    try:
        await eventually(lambda: b._synced, timeout=20)
        await asyncio.sleep(RETRY * 2)
        t0 = time.monotonic()
        await _stop(a, task_a)
        await eventually(lambda: b.elected, timeout=LEASE + 5)
        assert time.monotonic() - t0 < LEASE - 1  # released: no need to wait for expiry
    finally:
        await _stop(b, task_b)


async def test_a_release_hands_over_at_once_not_at_the_next_try(kube: k8s.ApiClient, namespace: str) -> None:
    """The standby watches the Lease: with tries 8 s apart it still takes over within a fraction of that once
    the leader shuts down cleanly (a rolling restart), with its caches synced and its warm-ups done while it
    waited. A leader elected at its first try skips them."""
    slow = LeaderElectionOptions(enabled=True, namespace=namespace, name="test-release", lease_duration=30.0,
                                 renew_deadline=20.0, retry_period=8.0)
    client = Client(kube, metrics=Metrics())
    a = Manager(kube, options(namespace, leader_election=replace(slow, identity="a")))
    b = Manager(kube, options(namespace, leader_election=replace(slow, identity="b")))
    warmed: list[tuple[str, bool]] = []

    def warm_up(name: str, mgr: Manager) -> Callable[[], Awaitable[None]]:
        async def warm() -> None:
            warmed.append((name, mgr.elected))
        return warm

    a.add_warm_up(warm_up("a", a))
    b.add_warm_up(warm_up("b", b))
    task_a = asyncio.create_task(a.run())
    await eventually(lambda: a.elected, timeout=20)
    task_b = asyncio.create_task(b.run())
    try:
        await eventually(lambda: b._synced, timeout=20)
        await eventually(lambda: warmed == [("b", False)], timeout=20)  # after b's first try, refused
        assert not b.elected  # and its next try is 8-9.6 s away
        await _stop(a, task_a)
        await eventually(lambda: b.elected, timeout=4.0)
        lease = await client.get(LEASE_KIND, "test-release", namespace)
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    finally:
        await _stop(b, task_b)
