"""The one run loop of every operator process (``runtime.run_manager``), on the real local control plane: how it
ends (stop event, SIGTERM, a lost lease, a failing task beside the manager) and what it closes on the way out."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import (
    Client,
    LeaderElectionOptions,
    Lifetime,
    Manager,
    Request,
    Result,
    run_manager,
)
from maasctl.runtime.leaderelection import LEASE
from maasctl.runtime.run import EXIT_LEADER_ELECTION_LOST, EXIT_OK, _signal_stops
from maasctl.testenv import ControlPlane

from .helpers import CONFIG_MAP, config_map, eventually, http_get, options

pytestmark = pytest.mark.integration


class Recorder:
    """A manager with one controller, a task beside it and two resources to close, noting what happens when."""

    def __init__(self, namespace: str, *, leader_election: LeaderElectionOptions | None = None) -> None:
        self.namespace = namespace
        self.leader_election = leader_election
        self.manager: Manager | None = None
        self.api: k8s.ApiClient | None = None
        self.reconciled = asyncio.Event()
        self.log: list[str] = []
        self.beside: asyncio.Future[None] | None = None  # set: the task beside the manager waits on it

    def build(self, api: k8s.ApiClient, lifetime: Lifetime) -> Manager:
        extra = {"leader_election": self.leader_election} if self.leader_election else {}
        manager = Manager(api, options(self.namespace, **extra))

        async def reconcile(req: Request) -> Result:
            self.reconciled.set()
            return Result.done()

        manager.controller("runloop").for_(CONFIG_MAP).complete(reconcile)

        async def close(what: str) -> None:
            # resources close after the manager stopped: its probe server is gone by now
            self.log.append(f"close {what} (probes {'up' if manager.health_port and manager._servers else 'down'})")

        lifetime.on_exit(lambda: close("first"))
        lifetime.on_exit(lambda: close("second"))

        async def beside() -> None:
            self.log.append("task started")
            try:
                if self.beside is not None:
                    await self.beside
                else:
                    await asyncio.Event().wait()
            finally:
                self.log.append("task stopped")

        lifetime.run_alongside("beside", beside)
        self.manager, self.api = manager, api
        return manager

    async def running(self) -> Manager:
        await eventually(lambda: self.manager is not None and all(c.started for c in self.manager.controllers),
                         timeout=30)
        assert self.manager is not None
        return self.manager


def start(cp: ControlPlane, rec: Recorder, stop: asyncio.Event | None = None) -> asyncio.Task[int]:
    return asyncio.create_task(run_manager(build=rec.build, kubeconfig=str(cp.kubeconfig), stop=stop))


async def test_stop_event_ends_it_cleanly_and_closes_in_order(control_plane: ControlPlane, namespace: str) -> None:
    stop = asyncio.Event()
    rec = Recorder(namespace)
    task = start(control_plane, rec, stop)
    manager = await rec.running()
    await Client(manager.raw_client.api).create(config_map("a", namespace))
    await asyncio.wait_for(rec.reconciled.wait(), 10)
    status, _ = await http_get(manager.health_port, "/readyz")
    assert status == 200
    stop.set()
    assert await asyncio.wait_for(task, 15) == EXIT_OK
    # the task beside stops after the manager; resources close last registered first, with the manager down
    assert rec.log == ["task started", "task stopped", "close second (probes down)", "close first (probes down)"]
    assert rec.api is not None and rec.api.rest_client.pool_manager.closed  # the API client closed too
    assert not _signal_stops  # its signal handling is gone with it


async def test_sigterm_ends_every_run_loop_of_the_process(control_plane: ControlPlane, namespace: str) -> None:
    """`maasctl dev` runs several operators in one event loop: one SIGTERM stops them all, each with 0."""
    first, second = Recorder(namespace), Recorder(namespace)
    tasks = [start(control_plane, first), start(control_plane, second)]
    await first.running()
    await second.running()
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(asyncio.gather(*tasks), 20) == [EXIT_OK, EXIT_OK]
    assert first.log[-1] == second.log[-1] == "close first (probes down)"
    assert not _signal_stops
    # the handlers are removed: the default action is back (SIGTERM would end the test process now)
    loop = asyncio.get_running_loop()
    assert not loop.remove_signal_handler(signal.SIGTERM)


async def test_a_lost_lease_ends_it_with_its_exit_code(control_plane: ControlPlane, kube: k8s.ApiClient,
                                                      namespace: str) -> None:
    le = LeaderElectionOptions(enabled=True, namespace=namespace, name="runloop", identity="me",
                               lease_duration=4.0, renew_deadline=3.0, retry_period=0.5)
    rec = Recorder(namespace, leader_election=le)
    task = start(control_plane, rec)
    manager = await rec.running()
    assert manager.elected
    # another holder takes the Lease on the server (as a partitioned leader sees it): renewals fail from now on
    client = Client(kube)
    lease = await client.get(LEASE, "runloop", namespace)
    lease["spec"] = {**lease["spec"], "holderIdentity": "thief", "leaseDurationSeconds": 60}
    await client.replace(lease)
    t0 = time.monotonic()
    assert await asyncio.wait_for(task, 20) == EXIT_LEADER_ELECTION_LOST
    assert time.monotonic() - t0 < 3.0 + 2.0  # within renew_deadline (and a retry)
    assert rec.log[-2:] == ["close second (probes down)", "close first (probes down)"]
    assert (await client.get(LEASE, "runloop", namespace))["spec"]["holderIdentity"] == "thief"  # not released


async def test_a_task_that_fails_ends_the_manager_with_its_error(control_plane: ControlPlane, namespace: str) -> None:
    rec = Recorder(namespace)
    rec.beside = asyncio.get_running_loop().create_future()
    task = start(control_plane, rec)
    manager = await rec.running()
    rec.beside.set_exception(OSError("webhook port taken"))
    with pytest.raises(OSError, match="webhook port taken"):
        await asyncio.wait_for(task, 15)
    assert manager._stopping  # the manager was stopped, not left running beside a dead receiver
    assert rec.log[-2:] == ["close second (probes down)", "close first (probes down)"]


async def test_a_task_that_returns_ends_the_manager_with_an_error(control_plane: ControlPlane,
                                                                 namespace: str) -> None:
    rec = Recorder(namespace)
    rec.beside = asyncio.get_running_loop().create_future()
    task = start(control_plane, rec)
    await rec.running()
    rec.beside.set_result(None)
    with pytest.raises(RuntimeError, match="beside ended while the manager was running"):
        await asyncio.wait_for(task, 15)
    assert rec.log[-1] == "close first (probes down)"
