"""GPU metering on the real control plane with Kueue's real CRDs (no Kueue controller: the test writes each
Workload's admission and conditions through the status subresource, as Kueue would), the billing controller
running as its ServiceAccount with a PostgreSQL ledger and a clock the test moves: the ledger holds exactly
GPUs x seconds x the seed's per-gpu-second rate, in segments, for a running, finished, evicted and re-admitted
Workload; a pass with nothing new adds nothing; a restarted controller and a pass that crashed before its commit
lose nothing and charge nothing twice; GPU time on a flavor without a SKU is reported unpriced; a Workload in a
Reservation's queue is covered by the Reservation."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.controller.app import catalog_from_cache
from maasctl.billing.controller.gpu_meter import GpuMeter
from maasctl.billing.ledger import Entry, Ledger
from maasctl.billing.ledger.rating_book import RatingBook
from maasctl.billing.rules import names
from maasctl.billing.rules import reservation as rsv
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, Billing, RunningBilling, eventually, start_billing

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
RATE = Decimal("0.001250")  # seed 002's h200-mig-3g.40gb, per GPU second
SKU = "h200-mig-3g.40gb"
MIN = timedelta(minutes=1)


@dataclasses.dataclass
class Meter:
    ledger: Ledger
    url: str
    start: datetime  # where the test's clock starts: an hour ahead of real time
    running: RunningBilling | None = None

    async def restart(self, cp: ControlPlane, at: datetime, **settings: Any) -> RunningBilling:
        """Stop the running controller (a crash between passes, as far as the ledger can tell) and start a fresh
        one, its clock at `at`."""
        if self.running is not None:
            await self.running.stop()
            self.running = None
        self.running = await start_billing(cp, dataclasses.replace(SETTINGS, ledger_url=self.url, **settings))
        self.running.clock.set(at)
        return self.running


@pytest.fixture
async def meter(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Meter]:
    url = await billing_pg.acreate_database(f"g_{uuid.uuid4().hex[:10]}")
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    m = Meter(ledger, url, datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1))
    try:
        yield m
    finally:
        if m.running is not None:
            await m.running.stop()
        await ledger.close()


FAST = {"gpu_meter_seconds": 1, "gpu_segment_seconds": 3600}


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def billing_objects(ns: str) -> list[dict[str, Any]]:
    effective = iso(datetime.now(UTC) + timedelta(seconds=30))
    return [
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": "pb-standard", "namespace": ns},
         "spec": {"currency": "USD", "effectiveFrom": effective, "noticeDays": 0, "skus": [
             {"sku": "llama-3-70b", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50"}},
             {"sku": SKU, "unit": "per-gpu-second", "rates": {"gpu_seconds": str(RATE)}}],
             "volumeTiers": [{"thresholdTokens": 0, "discountPct": "8"}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": "priority", "namespace": ns},
         "spec": {"limits": {"gpuQuota": 8}, "priceBookRef": "pb-standard",
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": "ten-helix", "namespace": ns,
                      "labels": {"billing.opendatahub.io/organization-id": f"helix-{ns}"}},
         "spec": {"displayName": "Helix", "planRef": {"name": "priority"}, "billingMode": "Invoiced"}},
    ]


class Kueue:
    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)

    async def flavor(self, name: str, labels: dict[str, str]) -> None:
        await self.custom.create_cluster_custom_object(*KUEUE, "resourceflavors",
                                                       {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                                        "kind": "ResourceFlavor",
                                                        "metadata": {"name": name, "labels": labels}, "spec": {}})

    async def workload(self, ns: str, name: str, gpus: str = "2") -> str:
        obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
               "spec": {"queueName": "gpus", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "train", "image": "trainer:1", "resources": {
                       "requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}]}}}]}}
        out = await self.custom.create_namespaced_custom_object(*KUEUE, ns, "workloads", obj)
        return str(out["metadata"]["uid"])

    async def status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        """Write the Workload's status as Kueue would (the status subresource; merge patch replaces lists)."""
        await self.custom.patch_namespaced_custom_object_status(*KUEUE, ns, "workloads", name, {"status": status},
                                                                _content_type="application/merge-patch+json")


def cond(type_: str, status: str, at: datetime) -> dict[str, Any]:
    return {"type": type_, "status": status, "lastTransitionTime": iso(at), "reason": "Test", "message": "set by test"}


def admitted(queue: str, flavor: str, gpus: str, at: datetime, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"admission": {"clusterQueue": queue, "podSetAssignments": [
        {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": flavor},
         "resourceUsage": {"nvidia.com/gpu": gpus}}]},
        "conditions": [cond("QuotaReserved", "True", at), cond("Admitted", "True", at), *extra]}


async def gpu_lines(ledger: Ledger, tenant: str) -> list[Entry]:
    return sorted((e for e in await ledger.entries(tenant, limit=500) if e.key.startswith("gpu:")),
                  key=lambda e: e.key)


def segment(e: Entry) -> tuple[str, str, str, str]:
    g = e.details["gpu"]
    return g["start"], g["end"], g["gpuSeconds"], str(-e.amount)


async def settle(meter: Meter, tenant: str, count: int) -> list[Entry]:
    """Wait for `count` GPU lines, then let a few more passes run (each second) and check they added nothing."""
    async def enough() -> list[Entry] | None:
        lines = await gpu_lines(meter.ledger, tenant)
        assert len(lines) <= count, [e.key for e in lines]
        return lines if len(lines) == count else None

    lines: list[Entry] = await eventually(enough, timeout=60)
    await asyncio.sleep(3)
    assert [e.key for e in await gpu_lines(meter.ledger, tenant)] == [e.key for e in lines]
    return lines


async def test_workloads_gpu_time_is_charged_exactly_once_per_segment(
        meter: Meter, billing: Billing, kube: k8s.ApiClient, namespace: str, billing_cluster: ControlPlane) -> None:
    kueue = Kueue(kube)
    t0 = meter.start
    clock = (await meter.restart(billing_cluster, t0, **FAST)).clock
    tenant = f"{namespace}/ten-helix"
    queue = names.queue_name(namespace, "ten-helix")
    flavor, plain = f"mig-{namespace}", f"plain-{namespace}"
    await kueue.flavor(flavor, {"billing.opendatahub.io/gpu-sku": SKU})
    await kueue.flavor(plain, {})
    for obj in billing_objects(namespace):
        await billing.create(obj)
    train = await kueue.workload(namespace, "train", "2")
    half = await kueue.workload(namespace, "half", "500m")  # half a GPU: resourceUsage is a quantity

    # Admitted half an hour ago (the meter first sees it now): charged from the admission to now at once.
    await kueue.status(namespace, "train", admitted(queue, flavor, "2", t0 - 30 * MIN))
    lines = await settle(meter, tenant, 1)
    assert lines[0].key == f"gpu:{train}:0:{int((t0 - 30 * MIN).timestamp())}"
    assert segment(lines[0]) == (iso(t0 - 30 * MIN), iso(t0), "3600", "4.500000")  # 2 x 1800 s x rate
    assert lines[0].details["sku"] == SKU and lines[0].details["priceBook"] == "pb-standard"
    assert "discountPct" not in lines[0].details  # token volume tiers do not discount GPU time
    assert lines[0].kind == "usage" and lines[0].tokens == 0

    # Less than an interval later: nothing; a whole interval later: the next segment.
    clock.set(t0 + 20 * MIN)
    await settle(meter, tenant, 1)
    clock.set(t0 + 61 * MIN)
    lines = await settle(meter, tenant, 2)
    assert sorted(segment(e) for e in lines)[1] == (iso(t0), iso(t0 + 61 * MIN), "7320", "9.150000")

    # The half-GPU Workload is evicted after 10 minutes (Kueue clears its admission) and re-admitted later.
    await kueue.status(namespace, "half", admitted(queue, flavor, "500m", t0 + 50 * MIN))
    lines = await settle(meter, tenant, 3)
    await kueue.status(namespace, "half", {"admission": None, "conditions": [
        cond("QuotaReserved", "False", t0 + 71 * MIN), cond("Admitted", "False", t0 + 71 * MIN),
        cond("Evicted", "True", t0 + 71 * MIN), cond("Preempted", "True", t0 + 71 * MIN)]})
    clock.set(t0 + 80 * MIN)
    lines = await settle(meter, tenant, 4)
    await kueue.status(namespace, "half", admitted(queue, flavor, "500m", t0 + 90 * MIN,
                                                   cond("Evicted", "True", t0 + 71 * MIN),
                                                   cond("Requeued", "True", t0 + 71 * MIN)))
    clock.set(t0 + 95 * MIN)
    lines = await settle(meter, tenant, 5)

    # The controller restarts (a crash between passes): the new one continues where the ledger is.
    clock = (await meter.restart(billing_cluster, t0 + 100 * MIN, **FAST)).clock
    await settle(meter, tenant, 5)

    # `train` finishes; `half` finishes too. Each gets its last segment to its finish, then nothing more.
    await kueue.status(namespace, "train", admitted(queue, flavor, "2", t0 - 30 * MIN,
                                                    cond("Finished", "True", t0 + 105 * MIN)))
    await kueue.status(namespace, "half", admitted(queue, flavor, "500m", t0 + 90 * MIN,
                                                   cond("Evicted", "True", t0 + 71 * MIN),
                                                   cond("Finished", "True", t0 + 110 * MIN)))
    clock.set(t0 + 3 * 60 * MIN)
    lines = await settle(meter, tenant, 7)
    by_uid: dict[str, list[tuple[str, str, str, str]]] = {}
    for e in lines:
        by_uid.setdefault(e.key.split(":")[1], []).append(segment(e))
    assert sorted(by_uid[train]) == [
        (iso(t0 - 30 * MIN), iso(t0), "3600", "4.500000"),
        (iso(t0), iso(t0 + 61 * MIN), "7320", "9.150000"),
        (iso(t0 + 61 * MIN), iso(t0 + 105 * MIN), "5280", "6.600000"),
    ]
    # half: 0.5 GPU from 50 to 71 min (two segments: first seen at 61, evicted at 71), and 90 to 110 min; the
    # 19 minutes in the queue cost nothing.
    assert sorted(by_uid[half]) == [
        (iso(t0 + 50 * MIN), iso(t0 + 61 * MIN), "330", "0.412500"),
        (iso(t0 + 61 * MIN), iso(t0 + 71 * MIN), "300", "0.375000"),
        (iso(t0 + 90 * MIN), iso(t0 + 95 * MIN), "150", "0.187500"),
        (iso(t0 + 95 * MIN), iso(t0 + 110 * MIN), "450", "0.562500"),
    ]
    total = sum((-e.amount for e in lines), Decimal(0))
    gpu_seconds = 2 * (135 * 60) + Decimal("0.5") * ((21 + 20) * 60)
    assert total == gpu_seconds * RATE == Decimal("21.7875")
    assert await meter.ledger.balance(tenant) == -total

    # GPU time on a flavor that names no SKU is reported unpriced (TenantAccount condition), never dropped.
    await kueue.workload(namespace, "nosku", "1")
    await kueue.status(namespace, "nosku", admitted(queue, plain, "1", t0 + 170 * MIN))

    async def reported() -> dict[str, Any] | None:
        count, latest = await RatingBook(meter.ledger.engine).unpriced(tenant, limit=1)
        return {"count": count, "latest": latest} if count else None

    found = await eventually(reported, timeout=60)
    assert found["count"] == 1 and "ResourceFlavor " + plain in found["latest"][0].reason
    assert found["latest"][0].model == f"flavor:{plain}"

    async def condition() -> dict[str, Any] | None:
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        c = {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}.get("UsagePriced")
        return c if c and c["status"] == "False" else None

    assert "ResourceFlavor" in (await eventually(condition, timeout=60))["message"]
    assert len(await gpu_lines(meter.ledger, tenant)) == 7  # nothing charged for it
    # Once the flavor names a SKU, the time since that segment's start is charged, under the same key.
    await kueue.custom.patch_cluster_custom_object(*KUEUE, "resourceflavors", plain, {"metadata": {"labels": {
        "billing.opendatahub.io/gpu-sku": SKU}}}, _content_type="application/merge-patch+json")
    lines = await settle(meter, tenant, 8)
    nosku = [e for e in lines if e.details["gpu"]["workload"]["name"] == "nosku"]
    assert [segment(e) for e in nosku] == [(iso(t0 + 170 * MIN), iso(t0 + 180 * MIN), "600", "0.750000")]
    assert nosku[0].key == found["latest"][0].record_id
    assert (await RatingBook(meter.ledger.engine).unpriced(tenant))[0] == 0  # the report went with the charge

    # A Workload admitted in the tenant's Reservation queue is covered by the Reservation's monthly price; one
    # evicted from the Plan's queue and re-admitted in the Reservation's is charged up to its eviction only.
    reserved_queue = rsv.queue_name(namespace, "ten-helix")
    await kueue.workload(namespace, "reserved", "4")
    await kueue.status(namespace, "reserved", admitted(reserved_queue, flavor, "4", t0 + 100 * MIN))
    moved = await kueue.workload(namespace, "moved", "1")
    await kueue.status(namespace, "moved", admitted(queue, flavor, "1", t0 + 160 * MIN))
    await settle(meter, tenant, 9)
    clock.set(t0 + 190 * MIN)
    await kueue.status(namespace, "moved", admitted(reserved_queue, flavor, "1", t0 + 188 * MIN,
                                                    cond("Evicted", "True", t0 + 185 * MIN)))
    lines = await settle(meter, tenant, 10)
    assert sorted(segment(e) for e in lines if e.key.split(":")[1] == moved) == [
        (iso(t0 + 160 * MIN), iso(t0 + 180 * MIN), "1200", "1.500000"),
        (iso(t0 + 180 * MIN), iso(t0 + 185 * MIN), "300", "0.375000"),
    ]

    # A pass that crashes before its commit (the database fails) writes nothing; the next one charges once.
    running = await meter.restart(billing_cluster, t0 - 2 * 60 * MIN)  # its own meter: nothing is due yet
    await kueue.workload(namespace, "late", "1")
    await kueue.status(namespace, "late", admitted(queue, flavor, "1", t0 + 120 * MIN))
    custom = k8s.CustomObjectsApi(running.api)  # read as the billing ServiceAccount

    async def workloads() -> list[dict[str, Any]]:
        out = await custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")
        return list(out["items"])

    items = await workloads()
    catalog = catalog_from_cache(running.manager.cache)

    async def synced() -> bool:
        return any(t.key == tenant for t in catalog().tenants.values())

    await eventually(synced)
    failing = Ledger.from_url(meter.url)
    try:
        crashing = GpuMeter(failing, catalog, lambda: items,
                            flavor_as_admin(kueue), lambda: t0 + 200 * MIN)
        real_post = failing.post

        async def crash(*args: Any, **kw: Any) -> Any:
            await real_post(*args, **kw)  # inside the pass's transaction, then the process "dies"
            raise ConnectionError("connection lost")

        failing.post = crash  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):
            await crashing.run_once()
        assert len(await gpu_lines(meter.ledger, tenant)) == 10
        failing.post = real_post  # type: ignore[method-assign]
        report = await crashing.run_once()
        assert report.charged == 1 and report.covered == 2
        again = await crashing.run_once()
        assert again.charged == 0
    finally:
        await failing.close()
    lines = await gpu_lines(meter.ledger, tenant)
    late = [segment(e) for e in lines if e.details["gpu"]["workload"]["name"] == "late"]
    assert late == [(iso(t0 + 120 * MIN), iso(t0 + 200 * MIN), "4800", "6.000000")]


def flavor_as_admin(kueue: Kueue) -> Any:
    async def read(name: str) -> dict[str, Any] | None:
        return dict(await kueue.custom.get_cluster_custom_object(*KUEUE, "resourceflavors", name))

    return read
