"""The three operator processes start through ``runtime.run_manager``: each, started by its run function on the
real local control plane, gets ready, and its caller's stop event ends it with 0 after closing what it opened
(the psp-connector's webhook receiver among it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import aiohttp
import pytest

from maasctl.app import run_controller
from maasctl.billing.connector.app import run_connector
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.billing.controller.app import run_billing
from maasctl.billing.controller.settings import BillingSettings
from maasctl.runtime.run import EXIT_OK, _signal_stops
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane
from maasctl.testenv.controlplane import free_port

from .helpers import eventually

pytestmark = pytest.mark.integration


async def _status(port: int, path: str) -> int | None:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as resp:
            return resp.status
    except aiohttp.ClientConnectionError:
        return None


async def _ready_then_stop(run: Awaitable[int], stop: asyncio.Event, health: int) -> None:
    task = asyncio.ensure_future(run)
    try:
        await eventually(lambda: _ready(health, task), timeout=60, every=0.2)
    finally:
        stop.set()
    assert await asyncio.wait_for(task, 30) == EXIT_OK
    assert await _status(health, "/readyz") is None  # its servers are down
    assert not _signal_stops


async def _ready(health: int, task: asyncio.Future[int]) -> bool:
    if task.done():
        task.result()  # raises its error
        raise AssertionError("the process ended before it was ready")
    return await _status(health, "/readyz") == 200


async def test_the_controller_runs_until_stopped(control_plane: ControlPlane, namespace: str) -> None:
    stop, health = asyncio.Event(), free_port()
    settings = ControllerSettings(kubeconfig=str(control_plane.kubeconfig), namespaces=(namespace,),
                                  metrics_bind_address="0", health_probe_bind_address=f"127.0.0.1:{health}")
    await _ready_then_stop(run_controller(settings, stop), stop, health)


async def test_the_billing_controller_runs_until_stopped(control_plane: ControlPlane, namespace: str,
                                                         tmp_path: Path) -> None:
    stop, health = asyncio.Event(), free_port()
    settings = BillingSettings(kubeconfig=str(control_plane.kubeconfig), namespaces=(namespace,),
                               metrics_bind_address="0", health_probe_bind_address=f"127.0.0.1:{health}",
                               ledger_url=f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    await _ready_then_stop(run_billing(settings, stop), stop, health)


async def test_the_psp_connector_serves_webhooks_until_stopped(control_plane: ControlPlane, namespace: str,
                                                               tmp_path: Path) -> None:
    stop, health, webhooks = asyncio.Event(), free_port(), free_port()
    settings = ConnectorSettings(kubeconfig=str(control_plane.kubeconfig), namespaces=(namespace,),
                                 ledger_url=f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
                                 webhook_bind_address=f"127.0.0.1:{webhooks}", metrics_bind_address="0",
                                 health_probe_bind_address=f"127.0.0.1:{health}")
    task = asyncio.ensure_future(run_connector(settings, stop))
    try:
        await eventually(lambda: _ready(health, task), timeout=60, every=0.2)
        # the receiver runs beside the manager: an unknown connector's webhook is answered, not refused
        assert await _status(webhooks, f"/webhooks/{namespace}/nobody") is not None
    finally:
        stop.set()
    assert await asyncio.wait_for(task, 30) == EXIT_OK
    assert await _status(webhooks, f"/webhooks/{namespace}/nobody") is None  # the receiver stopped
    assert await _status(health, "/readyz") is None
