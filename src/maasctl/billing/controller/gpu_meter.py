"""The GPU meter: charges the GPU time of Kueue Workloads admitted in tenants' ClusterQueues into the ledger,
idempotently (the rule is `gpu_metering`, pure; docs/billing.md, "GPU metering").

One pass (`GpuMeter.run_once`): list the Workloads (the cache), keep those admitted (now or before) in a queue
of a TenantAccount — the Plan's `billing-<ns>-<tenant>` (charged per GPU second) or its Reservation queue
`billing-rsv-<ns>-<tenant>` (covered by the Reservation's monthly price: counted, not charged) —, read what the
ledger already holds for them (`gpu:<uid>:...` keys: the last segment per admission and pod set), compute the
segments due, price each with the tenant's PriceBook in force at the segment's end and the SKU its
ResourceFlavor names, and write every charge and every unpriced segment in ONE database transaction. A crash
before the commit leaves nothing (the next pass computes the same segments from the same starts, up to a later
end); after it, the next pass continues from what is recorded. Keys make a second writer harmless.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from maasctl.billing.ledger import entries
from maasctl.billing.ledger.rating_book import RatingBook, Unpriced
from maasctl.billing.ledger.store import Ledger
from maasctl.billing.rules import gpu_metering as gm
from maasctl.billing.rules import names, rating
from maasctl.billing.rules import reservation as rsv
from maasctl.billing.rules.catalog import Catalog, TenantRef

__all__ = ["GpuMeter", "GpuMeterMetrics", "GpuReport"]

log = structlog.get_logger("maasctl.billing.gpu")


class GpuMeterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.segments = Counter("maasctl_billing_gpu_segments_total",
                                "GPU time segments of Kueue Workloads metered (charged, unpriced, covered by a "
                                "Reservation, unreadable Workloads)", ["result"], registry=r)
        self.gpu_seconds = Counter("maasctl_billing_gpu_seconds_charged_total",
                                   "GPU seconds charged to tenants (whole seconds)", registry=r)


@dataclass
class GpuReport:
    workloads: int = 0  # in a tenant's queue
    charged: int = 0
    unpriced: int = 0
    covered: int = 0  # admitted in a Reservation's queue: its monthly price covers them
    invalid: int = 0
    tenants: set[str] = field(default_factory=set)


def _queues(catalog: Catalog) -> dict[str, tuple[TenantRef, bool]]:
    """ClusterQueue name -> (tenant, reserved?)."""
    out: dict[str, tuple[TenantRef, bool]] = {}
    for t in catalog.tenants.values():
        out[names.queue_name(t.namespace, t.name)] = (t, False)
        out[rsv.queue_name(t.namespace, t.name)] = (t, True)
    return out


class GpuMeter:
    """Meters and rates GPU time into the ledger, one database transaction per pass."""

    def __init__(self, ledger: Ledger, catalog: Callable[[], Catalog],
                 workloads: Callable[[], Iterable[Mapping[str, Any]]],
                 flavor: Callable[[str], Awaitable[Mapping[str, Any] | None]], now: Callable[[], datetime], *,
                 interval: timedelta = timedelta(hours=1), metrics: GpuMeterMetrics | None = None,
                 on_charged: Callable[[set[str]], None] | None = None) -> None:
        self.ledger = ledger
        self.book = RatingBook(ledger.engine)  # unpriced segments: the ledger's database
        self.catalog = catalog
        self.workloads = workloads
        self.flavor = flavor
        self.now = now
        self.interval = interval
        self.metrics = metrics or GpuMeterMetrics()
        self.on_charged = on_charged
        self._settled: dict[str, str] = {}  # uid -> resourceVersion of a Workload found with nothing left to do

    async def charged(self, uids: Sequence[str]) -> dict[str, list[gm.Charged]]:
        """The GPU segments the ledger holds per Workload uid (a key range per uid: the unique key's index)."""
        out: dict[str, list[gm.Charged]] = {u: [] for u in uids}
        for key, details in await self.ledger.details_by_prefix([f"gpu:{u}:" for u in uids]):
            c = gm.charged_of(details.get("gpu") or {})
            uid = key.split(":")[1]
            if c is not None and uid in out:
                out[uid].append(c)
        return out

    async def run_once(self) -> GpuReport:
        report = GpuReport()
        now = self.now()
        catalog = self.catalog()
        queues = _queues(catalog)
        mine: list[gm.Workload] = []
        listed = list(self.workloads())
        present = {str((o.get("metadata") or {}).get("uid", "")) for o in listed}
        self._settled = {u: rv for u, rv in self._settled.items() if u in present}
        for obj in listed:
            try:
                wl = gm.workload_of(obj)
            except ValueError as exc:
                report.invalid += 1
                self.metrics.segments.labels("invalid").inc()
                meta = obj.get("metadata") or {}
                log.warning("a Workload's admission cannot be metered", namespace=meta.get("namespace"),
                            workload=meta.get("name"), error=str(exc))
                continue
            if not wl.uid or self._settled.get(wl.uid) == wl.resource_version:
                continue  # unchanged since a pass found nothing left to charge (finished, evicted, never ours)
            if wl.admission is not None and wl.admission.cluster_queue in queues:
                mine.append(wl)
            elif wl.admission is None and wl.transitions:
                mine.append(wl)  # not admitted now: maybe one whose admission we were charging (evicted)
        held = await self.charged([wl.uid for wl in mine])
        settled: dict[str, str] = {}  # remembered once the pass has committed
        flavors: dict[str, tuple[str | None, str]] = {}
        txs: list[entries.Transaction] = []
        unpriced: list[Unpriced] = []
        for wl in mine:
            due = gm.segments(wl, gm.last_charged(held.get(wl.uid, [])), now, self.interval)
            owners = [(seg, queues.get(seg.cluster_queue)) for seg in due]
            charge = [(seg, owner[0]) for seg, owner in owners if owner is not None and not owner[1]]
            covered = any(owner is not None and owner[1] for _, owner in owners)
            in_reservation = wl.admission is not None and queues.get(wl.admission.cluster_queue, (None, False))[1]
            if due:
                report.workloads += 1
            if covered:
                report.covered += 1
                self.metrics.segments.labels("covered").inc()
            if not charge and wl.settled(now, running_covered=in_reservation):
                settled[wl.uid] = wl.resource_version  # nothing due until it changes
            for seg, tenant in charge:
                if seg.flavor not in flavors:
                    flavors[seg.flavor] = gm.flavor_sku(await self.flavor(seg.flavor) if seg.flavor else None)
                sku, geo = flavors[seg.flavor]
                line = self._rate(seg, tenant, catalog, sku, geo or tenant.geo)
                report.tenants.add(tenant.key)
                if isinstance(line, rating.Unpriced):
                    unpriced.append(Unpriced(seg.key, tenant.key, sku or f"flavor:{seg.flavor}", seg.start,
                                             line.reason))
                    continue
                txs.append(entries.usage_charge(seg.key, tenant.key, seg.end, line.amount, currency=line.currency,
                                                tokens=0, details={**line.details(), "gpu": seg.details()}))
        if txs or unpriced:
            seen = await self.book.reported([u.record_id for u in unpriced])
            async with self.ledger.engine.begin() as conn:
                result = await self.ledger.post(txs, conn=conn)
                await self.book.mark_unpriced(unpriced, conn=conn)
                # a segment reported unpriced earlier and charged now: its report goes with the charge
                await self.book.settle_unpriced([tx.key for tx in txs], conn=conn)
            inserted = set(result.inserted)
            report.charged = len(inserted)
            report.unpriced = len(unpriced)
            fresh = [u for u in unpriced if u.record_id not in seen]
            self.metrics.segments.labels("charged").inc(report.charged)
            self.metrics.segments.labels("unpriced").inc(len(fresh))
            seconds = sum((Decimal(str(tx.details["gpu"]["gpuSeconds"])) for tx in txs if tx.key in inserted),
                          Decimal(0))
            self.metrics.gpu_seconds.inc(int(seconds))
            if inserted or fresh:
                log.info("metered GPU time", charged=report.charged, unpriced=len(fresh),
                         gpu_seconds=str(seconds), tenants=len(report.tenants))
            woken = {tx.tenant for tx in txs if tx.key in inserted} | {u.tenant for u in fresh}
            if self.on_charged is not None and woken:
                self.on_charged(woken)
        self._settled.update(settled)
        return report

    def _rate(self, seg: gm.Segment, tenant: TenantRef, catalog: Catalog, sku: str | None, geo: str
              ) -> rating.RatedLine | rating.Unpriced:
        book = catalog.book_for(tenant, seg.end)
        if book is None:
            return rating.Unpriced(seg.key, sku or "", "",
                                   f"no PriceBook is in force for tenant {tenant.name} at {seg.end.isoformat()}")
        if sku is None:
            return rating.Unpriced(seg.key, "", book.name,
                                   f"GPU time on ResourceFlavor {seg.flavor or '(none)'} has no SKU: label the "
                                   f"flavor {gm.GPU_SKU_LABEL}=<sku of PriceBook {book.name}>")
        return gm.rate_segment(seg, sku, geo, book, catalog.provider_costs.get(tenant.namespace, {}))

