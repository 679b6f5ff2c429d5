"""Reservations on the real control plane (Node objects carrying nvidia.com/gpu allocatable and the pool labels,
Kueue's real CRDs), the billing controller running as its ServiceAccount with a PostgreSQL ledger and a clock the
test moves: capacity is checked per pool and an overlapping Guaranteed request is refused until capacity frees,
Preemptible overbooks and is reclaimed first, the tenant's ClusterQueue follows the active reservations, and each
month of the window is charged once (prorated), through cancellation and expiry."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import Ledger
from maasctl.billing.rules import reservation as rsv
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, Billing, RunningBilling, eventually, start_billing, wait_event
from .test_plan_reconciler import CQ, RF, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"


@dataclasses.dataclass
class Reservations:
    running: RunningBilling
    ledger: Ledger


@pytest.fixture(scope="module")
async def reservations(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Reservations]:
    url = await billing_pg.acreate_database(f"r_{uuid.uuid4().hex[:10]}")
    running = await start_billing(billing_cluster, dataclasses.replace(SETTINGS, ledger_url=url))
    running.clock.set(datetime(2026, 8, 20, tzinfo=UTC))
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Reservations(running, ledger)
    finally:
        await running.stop()
        await ledger.close()


async def gpu_node(kube: k8s.ApiClient, name: str, sku: str, geo: str, gpus: int) -> None:
    """A Node with GPU capacity (no kubelet: the test writes its status)."""
    core = k8s.CoreV1Api(kube)
    await core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={
        "billing.opendatahub.io/gpu-sku": sku, "billing.opendatahub.io/geo": geo})))
    await core.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                                                   "allocatable": {"nvidia.com/gpu": str(gpus)}}})


def reservation(ns: str, name: str, sku: str, count: int, start: str, end: str, klass: str, price: str
                ) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Reservation", "metadata": {"name": name, "namespace": ns},
            "spec": {"tenantRef": "ten-helix", "sku": sku, "count": count, "geo": "us-east",
                     "window": {"start": start, "end": end}, "class": klass, "monthlyPrice": price}}


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def test_capacity_lifecycle_kueue_and_charges(reservations: Reservations, billing: Billing,
                                                    kube: k8s.ApiClient, namespace: str) -> None:
    cluster = Cluster(kube)
    clock = reservations.running.clock
    clock.set(datetime(2026, 8, 20, tzinfo=UTC))
    sku = f"h200-{uuid.uuid4().hex[:6]}"  # a pool of this test's own (Nodes are cluster-wide)
    pool = rsv.Pool("us-east", sku)
    nodes = [f"gpu-{sku}-a", f"gpu-{sku}-b"]
    await gpu_node(kube, nodes[0], sku, "us-east", 4)
    await gpu_node(kube, nodes[1], sku, "us-east", 4)
    tenant_key = f"{namespace}/ten-helix"
    queue = rsv.queue_name(namespace, "ten-helix")
    try:
        await billing.create({"apiVersion": API, "kind": "TenantAccount",
                              "metadata": {"name": "ten-helix", "namespace": namespace,
                                           "labels": {"billing.opendatahub.io/organization-id": "helix"}},
                              "spec": {"displayName": "Helix", "planRef": {"name": "none"},
                                       "billingMode": "Invoiced"}})
        await billing.create(reservation(namespace, "big", sku, 6, "2026-09-01T00:00:00Z", "2026-09-30T23:59:59Z",
                                         "Guaranteed", "12000.000000"))

        async def state(name: str, want: str) -> dict[str, Any] | None:
            obj = await billing.get("Reservation", name, namespace)
            return obj if ((obj or {}).get("status") or {}).get("state") == want else None

        big = await eventually(lambda: state("big", "Confirmed"))
        assert big["status"]["capacityCheck"] == {"available": True, "pool": pool.name}
        assert conditions(big)["CapacityConfirmed"]["reason"] == "CapacityAvailable"
        assert conditions(big)["Charged"]["reason"] == "NotDue"

        # An overlapping Guaranteed request does not fit (6 + 4 > 8): refused capacity, stays Requested.
        await billing.create(reservation(namespace, "second", sku, 4, "2026-09-15T00:00:00Z", "2026-10-14T23:59:59Z",
                                         "Guaranteed", "3000"))
        second = await eventually(lambda: state("second", "Requested"))
        assert second["status"]["capacityCheck"] == {"available": False, "pool": pool.name}
        assert conditions(second)["CapacityConfirmed"]["reason"] == "InsufficientCapacity"
        await wait_event(kube, namespace, "second", "Requested", "Warning")

        # A Preemptible request overbooks.
        await billing.create(reservation(namespace, "spot", sku, 4, "2026-09-01T00:00:00Z", "2026-09-07T23:59:59Z",
                                         "Preemptible", "2400"))
        spot = await eventually(lambda: state("spot", "Confirmed"))
        assert conditions(spot)["CapacityConfirmed"]["reason"] == "Overbooked"

        # September begins: both are Active; Guaranteed demand reclaims half of the preemptible GPUs.
        clock.set(datetime(2026, 9, 1, tzinfo=UTC))
        await eventually(lambda: state("big", "Active"))
        spot = await eventually(lambda: state("spot", "Active"))

        async def reclaimed() -> dict[str, Any] | None:
            obj = await billing.get("Reservation", "spot", namespace)
            return obj if conditions(obj or {}).get("CapacityConfirmed", {}).get("reason") == "Reclaimed" else None

        await eventually(reclaimed)

        async def quota(want: list[dict[str, Any]]) -> bool:
            q = await cluster.get(CQ, queue)
            return q is not None and q["spec"].get("resourceGroups", []) == ([
                {"coveredResources": ["nvidia.com/gpu"], "flavors": want}] if want else [])

        flavor = rsv.flavor_name(pool)
        await eventually(lambda: quota([{"name": flavor, "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": 6, "borrowingLimit": 2}]}]))

        async def lent(want: int) -> bool:
            q = await cluster.get(CQ, rsv.LENDER_QUEUE)
            groups = ((q or {}).get("spec") or {}).get("resourceGroups") or []
            return {f["name"]: f["resources"][0]["nominalQuota"] for g in groups for f in g["flavors"]}.get(
                flavor) == want

        await eventually(lambda: lent(2))  # the GPUs no Guaranteed reservation holds: what the spot borrows
        q = await cluster.get(CQ, queue)
        assert q is not None and q["spec"]["cohortName"] == rsv.COHORT
        assert q["spec"]["namespaceSelector"] == {"matchLabels": {"billing.opendatahub.io/tenant": "helix"}}
        rf = await cluster.get(RF, flavor)
        assert rf is not None and rf["spec"]["nodeLabels"] == {"billing.opendatahub.io/gpu-sku": sku,
                                                               "billing.opendatahub.io/geo": "us-east"}
        big = await billing.get("Reservation", "big", namespace)
        assert big is not None and conditions(big)["KueueSynced"]["status"] == "True"

        async def charges() -> dict[str, Decimal]:
            entries = await reservations.ledger.entries(tenant_key, kind="reservation")
            return {e.key.removeprefix(f"reservation:{namespace}/"): -e.amount for e in entries}

        await eventually(lambda: _equal(charges, {"big:2026-09": Decimal("12000.000000"),
                                                  "spot:2026-09": Decimal("560.000000")}))  # 7 of 30 days

        # Cancel the big one on the 10th: Cancelled, its capacity goes to the waiting request; no refund, no
        # second charge.
        clock.set(datetime(2026, 9, 10, tzinfo=UTC))
        await billing.patch("Reservation", "big", namespace,
                            {"metadata": {"annotations": {"billing.opendatahub.io/cancelled": "project ended"}}})
        big = await eventually(lambda: state("big", "Cancelled"))
        assert big["status"]["cancelledAt"] == "2026-09-10T00:00:00Z"
        await eventually(lambda: state("spot", "Expired"))  # the window ended on the 8th
        second = await eventually(lambda: state("second", "Confirmed"))
        assert conditions(second)["CapacityConfirmed"]["status"] == "True"

        clock.set(datetime(2026, 9, 15, tzinfo=UTC))
        await eventually(lambda: state("second", "Active"))
        await eventually(lambda: quota([{"name": flavor, "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}]}]))
        await eventually(lambda: lent(4))
        clock.set(datetime(2026, 10, 1, tzinfo=UTC))
        # Second: 16 of September's 30 days, then 14 of October's 31 (rounded once, half-even, 6 places).
        want = {"big:2026-09": Decimal("12000.000000"), "spot:2026-09": Decimal("560.000000"),
                "second:2026-09": Decimal("1600.000000"), "second:2026-10": Decimal("1354.838710")}
        await eventually(lambda: _equal(charges, want))

        clock.set(datetime(2026, 10, 15, tzinfo=UTC))
        second = await eventually(lambda: state("second", "Expired"))
        await eventually(lambda: quota([]))
        await eventually(lambda: lent(8))
        assert await charges() == want  # every reconcile since charged nothing twice
        assert await reservations.ledger.balance(tenant_key) == -sum(want.values())
        assert await reservations.ledger.verify() == []
    finally:
        core = k8s.CoreV1Api(kube)
        for name in nodes:
            await core.delete_node(name)


async def _equal(check: Any, want: Any) -> bool:
    return bool(await check() == want)


async def test_a_preemptible_reservation_on_a_pool_without_gpus_is_not_confirmed(
        reservations: Reservations, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    """Capacity is checked for every class: a Preemptible request on a pool of 0 GPUs (and on a pool no node is in)
    stays Requested with `CapacityConfirmed=False` saying why, a Warning Event and no charge; once the pool has the
    GPUs it is confirmed by itself (a Node change wakes it)."""
    clock = reservations.running.clock
    clock.set(datetime(2026, 8, 20, tzinfo=UTC))
    sku = f"l4-{uuid.uuid4().hex[:6]}"
    node = f"gpu-{sku}-empty"
    await gpu_node(kube, node, sku, "us-east", 0)
    try:
        for name, pool_sku in (("spot-empty", sku), ("spot-nowhere", f"{sku}-none")):
            await billing.create(reservation(namespace, name, pool_sku, 1, "2026-09-01T00:00:00Z",
                                             "2026-09-30T23:59:59Z", "Preemptible", "100"))

        async def requested(name: str) -> dict[str, Any] | None:
            obj = await billing.get("Reservation", name, namespace)
            cond = conditions(obj or {}).get("CapacityConfirmed") or {}
            return obj if cond.get("reason") == "InsufficientCapacity" else None

        empty = await eventually(lambda: requested("spot-empty"))
        assert empty["status"]["state"] == "Requested"
        assert empty["status"]["capacityCheck"] == {"available": False, "pool": f"us-east/{sku}"}
        cond = conditions(empty)["CapacityConfirmed"]
        assert cond["status"] == "False" and "has no GPUs" in cond["message"] and "Preemptible" in cond["message"]
        assert conditions(empty)["Charged"]["reason"] == "NotDue"
        await wait_event(kube, namespace, "spot-empty", "Requested", "Warning")
        nowhere = await eventually(lambda: requested("spot-nowhere"))
        assert nowhere["status"]["state"] == "Requested"

        await k8s.CoreV1Api(kube).patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": "2"},
                                                                      "allocatable": {"nvidia.com/gpu": "2"}}})

        async def confirmed() -> dict[str, Any] | None:
            obj = await billing.get("Reservation", "spot-empty", namespace)
            return obj if ((obj or {}).get("status") or {}).get("state") == "Confirmed" else None

        now = await eventually(confirmed)
        assert conditions(now)["CapacityConfirmed"]["reason"] == "Preemptible"
        assert (await requested("spot-nowhere")) is not None  # still no node in that pool
    finally:
        await k8s.CoreV1Api(kube).delete_node(node)
        for name in ("spot-empty", "spot-nowhere"):
            await billing.delete("Reservation", name, namespace)
