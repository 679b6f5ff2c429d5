"""Wiring of the controller process: connect, build the Manager, register the MaaS controllers, run."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.builders.names import FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL, STATUS_FIELD_MANAGER
from maasctl.reconcilers.cleanup import JOB
from maasctl.reconcilers.kinds import SERVICE
from maasctl.reconcilers.setup import setup_controllers
from maasctl.runtime import LeaderElectionLost, LeaderElectionOptions, Manager, ManagerOptions
from maasctl.runtime.connect import connect
from maasctl.settings import ControllerSettings

log = structlog.get_logger("maasctl")


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


def manager_options(settings: ControllerSettings) -> ManagerOptions:
    return ManagerOptions(
        namespaces=settings.namespaces,
        metrics_bind_address=settings.metrics_bind_address,
        health_probe_bind_address=settings.health_probe_bind_address,
        leader_election=LeaderElectionOptions(
            enabled=settings.leader_elect,
            namespace=settings.leader_election_namespace,
            name=settings.leader_election_id.replace(".", "-"),
        ),
        max_concurrent_reconciles=settings.max_concurrent_reconciles,
        field_manager=FIELD_MANAGER,
        status_field_manager=STATUS_FIELD_MANAGER,
        # Services and Jobs are watched only for the ones we generate: never the whole cluster's.
        cache_label_selectors={kind: f"{MANAGED_BY_LABEL}={MANAGED_BY}" for kind in (SERVICE, JOB)},
    )


def build_manager(api: k8s.ApiClient, settings: ControllerSettings) -> Manager:
    manager = Manager(api, manager_options(settings))
    setup_controllers(manager, settings)
    return manager


async def run_controller(settings: ControllerSettings, stop: asyncio.Event | None = None) -> int:
    """Run the controller until SIGINT/SIGTERM (or `stop` is set)."""
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    api = await connect(settings.kubeconfig)
    try:
        manager = build_manager(api, settings)
        log.info("starting controller", server=api.configuration.host,
                 subscription_namespace=settings.subscription_namespace)
        runner = asyncio.create_task(manager.run(), name="manager")
        stopper = asyncio.create_task(stop.wait(), name="stop")
        done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            log.info("shutting down")
            manager.stop()
        else:
            stopper.cancel()
        try:
            await runner
        except LeaderElectionLost:
            log.error("leader election lost; exiting so a fresh process can compete again")
            return 1
    finally:
        await api.close()
    return 0
