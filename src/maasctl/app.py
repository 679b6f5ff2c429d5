"""Wiring of the controller process: connect to the cluster and run until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import structlog
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from maasctl.settings import ControllerSettings

log = structlog.get_logger("maasctl")


async def connect(kubeconfig: str | None) -> k8s.ApiClient:
    """An ApiClient from the kubeconfig, else the in-cluster config, else ~/.kube/config."""
    configuration = k8s.Configuration()
    if kubeconfig:
        await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            await k8s_config.load_kube_config(client_configuration=configuration)
    return k8s.ApiClient(configuration)


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def run_controller(settings: ControllerSettings, stop: asyncio.Event | None = None) -> int:
    """Run the controller until SIGINT/SIGTERM (or `stop` is set)."""
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    api = await connect(settings.kubeconfig)
    try:
        version = await k8s.VersionApi(api).get_code()
        log.info("connected", server=api.configuration.host, version=version.git_version)
        await stop.wait()
        log.info("shutting down")
    finally:
        await api.close()
    return 0
