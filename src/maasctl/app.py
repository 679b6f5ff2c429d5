"""Wiring of the controller process: connect, build the Manager, register the MaaS controllers, run."""

from __future__ import annotations

import asyncio

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.builders.names import FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL, STATUS_FIELD_MANAGER
from maasctl.contract.labels import UPSTREAM_KEY_SELECTOR
from maasctl.reconcilers.cleanup import JOB
from maasctl.reconcilers.externalmodel import secret_keys_only
from maasctl.reconcilers.kinds import SECRET, SERVICE
from maasctl.reconcilers.setup import setup_controllers
from maasctl.runtime import LeaderElectionOptions, Lifetime, Manager, ManagerOptions, run_manager
from maasctl.runtime import stop_on_signals as runtime_stop_on_signals
from maasctl.settings import ControllerSettings

log = structlog.get_logger("maasctl")


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT/SIGTERM set `stop` for the rest of the process (`maasctl dev`; the run loops register theirs)."""
    runtime_stop_on_signals(stop)


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
        # Services and Jobs are watched only for the ones we generate: never the whole cluster's. Secrets only
        # for the provider keys the ExternalModel controller labelled, and never with their values.
        cache_label_selectors={**{kind: f"{MANAGED_BY_LABEL}={MANAGED_BY}" for kind in (SERVICE, JOB)},
                               SECRET: UPSTREAM_KEY_SELECTOR},
        cache_transforms={SECRET: secret_keys_only},
    )


def build_manager(api: k8s.ApiClient, settings: ControllerSettings) -> Manager:
    manager = Manager(api, manager_options(settings))
    setup_controllers(manager, settings)
    return manager


async def run_controller(settings: ControllerSettings, stop: asyncio.Event | None = None) -> int:
    """Run the controller until SIGINT/SIGTERM (or `stop` is set); 1 when the leader lease is lost."""

    def build(api: k8s.ApiClient, _: Lifetime) -> Manager:
        manager = build_manager(api, settings)
        log.info("starting controller", server=api.configuration.host,
                 subscription_namespace=settings.subscription_namespace)
        return manager

    return await run_manager(build=build, kubeconfig=settings.kubeconfig, stop=stop, name="manager")
