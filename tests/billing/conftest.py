"""Billing fixtures on the session control plane: the billing CRDs installed once, helpers to create objects."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api import GROUP, KINDS, VERSION
from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.controller.app import build_billing_manager
from maasctl.billing.controller.settings import BillingSettings
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.catalog import charged_from
from maasctl.billing.rules.clock import ManualClock
from maasctl.runtime import Manager
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents, wait_established
from maasctl.testenv.postgres import PostgresServer, start_postgres
from tests.install.manifests import DEFAULT_SUBSCRIPTION_NS, apply_docs, identity_docs, service_account_api

PLURAL = {kind.__name__: kind.crd.plural for kind in KINDS}
CLUSTER_SCOPED = {kind.__name__ for kind in KINDS if kind.crd.scope == "Cluster"}


@pytest.fixture(scope="session")
async def billing_cluster(control_plane: ControlPlane) -> AsyncIterator[ControlPlane]:
    """The session control plane with the billing CRDs installed."""
    api = await connect(str(control_plane.kubeconfig))
    try:
        await install_billing_crds(api)
    finally:
        await api.close()
    yield control_plane


class Billing:
    """Create/read/patch billing objects as the admin, in whatever namespace the object names."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)

    async def create(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        kind = obj["kind"]
        if kind in CLUSTER_SCOPED:
            out = await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL[kind], obj,
                                                                 field_validation="Strict", **kw)
        else:
            out = await self.custom.create_namespaced_custom_object(
                GROUP, VERSION, obj["metadata"]["namespace"], PLURAL[kind], obj, field_validation="Strict", **kw)
        return out  # type: ignore[no-any-return]

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            if kind in CLUSTER_SCOPED:
                return await self.custom.get_cluster_custom_object(  # type: ignore[no-any-return]
                    GROUP, VERSION, PLURAL[kind], name)
            return await self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
                GROUP, VERSION, namespace, PLURAL[kind], name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch(self, kind: str, name: str, namespace: str, body: Any, *, status: bool = False) -> dict[str, Any]:
        call = (self.custom.patch_namespaced_custom_object_status if status
                else self.custom.patch_namespaced_custom_object)
        return await call(GROUP, VERSION, namespace, PLURAL[kind], name, body,  # type: ignore[no-any-return]
                          _content_type="application/merge-patch+json")

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            if kind in CLUSTER_SCOPED:
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL[kind], name)
            else:
                await self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL[kind], name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def billing(billing_cluster: ControlPlane, kube: k8s.ApiClient) -> Billing:
    return Billing(kube)


def error_message(exc: k8s.ApiException) -> str:
    try:
        return str(json.loads(exc.body or b"")["message"])
    except (ValueError, KeyError, TypeError):
        return str(exc.body)


# -- the billing controller, run as its own ServiceAccount -------------------------------------------------------

CONTROLLER_NS = "opendatahub"
SETTINGS = BillingSettings(metrics_bind_address="0", health_probe_bind_address="0", leader_election_namespace=
                           CONTROLLER_NS, dependency_recheck_seconds=1)


async def billing_controller_api(cp: ControlPlane) -> k8s.ApiClient:
    """Apply the billing controller's RBAC from the default overlay; a client acting as its ServiceAccount."""
    await apply_docs(cp, identity_docs({"billing-controller"}, CONTROLLER_NS, DEFAULT_SUBSCRIPTION_NS))
    return await service_account_api(cp, CONTROLLER_NS, "billing-controller",
                                     ready_checks=[("list", "pricebooks.billing.opendatahub.io", "-A"),
                                                   ("create", "leases.coordination.k8s.io", "-n", CONTROLLER_NS)])


@dataclass
class RunningBilling:
    manager: Manager
    clock: ManualClock
    task: asyncio.Task[None]
    api: k8s.ApiClient

    async def stop(self) -> None:
        self.manager.stop()
        await asyncio.wait_for(self.task, 40)
        await self.api.close()


async def start_billing(cp: ControlPlane, settings: BillingSettings = SETTINGS) -> RunningBilling:
    api = await billing_controller_api(cp)
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    manager = build_billing_manager(api, settings, clock)
    running = RunningBilling(manager, clock, asyncio.create_task(manager.run()), api)

    async def started() -> bool:  # its tasks exist before a test starts (no_leaks counts the ones a test starts)
        assert not running.task.done(), running.task
        return all(c.started for c in manager.controllers)

    await eventually(started)
    return running


@pytest.fixture(scope="module")
async def billing_controller(billing_cluster: ControlPlane) -> AsyncIterator[RunningBilling]:
    """One billing controller per test module, on a ManualClock the tests move."""
    running = await start_billing(billing_cluster)
    try:
        yield running
    finally:
        await running.stop()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 120, interval: float = 0.2) -> Any:
    """Poll `check` until it returns a truthy value (returned), retrying on AssertionError."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = await check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached in {timeout}s; last: {last!r}")
        await asyncio.sleep(interval)


async def chargeable_from(billing: Billing, namespace: str, tenant: str, effective: datetime) -> None:
    """Wait until usage stamped with the wall clock is charged to TenantAccount `tenant`: its PriceBook is in
    force (`effective`) and its creation second is over (a record of that second predates the account, so it is
    showback: `catalog.TenantRef.predates`). Creating the objects can take more than the second a test gives
    `effective` on a loaded machine, so `effective` alone is not enough."""
    obj = await billing.get("TenantAccount", tenant, namespace)
    assert obj is not None, f"TenantAccount {namespace}/{tenant}"
    created = datetime.strptime(obj["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    start = max(effective, charged_from(created))
    await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + 0.1)


async def events_for(api: k8s.ApiClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, note) of the events.k8s.io Events about object `name` in `namespace`."""
    out = await k8s.EventsV1Api(api).list_namespaced_event(namespace)
    return [(e.type, e.reason, e.note or "") for e in out.items if e.regarding and e.regarding.name == name]


async def wait_event(api: k8s.ApiClient, namespace: str, name: str, reason: str, type_: str | None = None) -> str:
    """The note of the first Event with `reason` (and `type_`) about `name`, once it exists.

    Events are written after the status they explain, so a test that saw the status waits for them too."""

    async def found() -> str | None:
        for t, r, note in await events_for(api, namespace, name):
            if r == reason and type_ in (None, t):
                return note or "(no note)"
        return None

    note: str = await eventually(found)
    return note


ROUTE_CRD = Path(__file__).parent / "data" / "routes.route.openshift.io.yaml"


def install_route_crd(cp: ControlPlane) -> None:
    """A minimal OpenShift Route CRD (test data): the Route API served, as on OpenShift."""
    with cp.http_client() as http:
        wait_established(http, apply_documents(http, load_documents([ROUTE_CRD]), field_manager="tests"))


# -- the ledger on SQLite and on a real PostgreSQL server -------------------------------------------------------


@pytest.fixture(scope="session")
def billing_pg() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the billing tests (Debian binaries, or testcontainers on request)."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
async def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database per test: file SQLite, or a new database on the session PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    server: PostgresServer = request.getfixturevalue("billing_pg")
    return await server.acreate_database(f"l_{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def ledger(ledger_url: str) -> AsyncIterator[Ledger]:
    led = Ledger.from_url(ledger_url)
    await led.create_schema()
    try:
        yield led
    finally:
        await led.close()
