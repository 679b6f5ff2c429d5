"""Reservation decisions, pure: GPU pools and capacity, admission, lifecycle, Kueue quota and monthly charges.

The rules (docs/billing.md, "Reservations"):

- **Pools.** A node belongs to the pool `<region>/<product>` given by its labels: product
  `billing.opendatahub.io/gpu-sku`, else `nvidia.com/gpu.product` (GPU feature discovery); region
  `billing.opendatahub.io/geo`, else `topology.kubernetes.io/region`. A pool's capacity is the sum of
  `status.allocatable["nvidia.com/gpu"]` of its schedulable nodes. A Reservation asks the pool `<geo>/<sku>`.
- **Windows** cover `[start, end]` to the second: the reservation holds from `start` up to and including the
  second `end` names, i.e. until `end + 1s` (so the seed's `...-30T23:59:59Z` is a whole month).
- **Admission** (per pool, oldest first by creation time then name; already confirmed ones first, so a new request
  never displaces a confirmed one): a Guaranteed reservation is confirmed when, at every instant of its window,
  the Guaranteed reservations confirmed before it plus itself fit in the capacity (peak, not sum, of overlapping
  windows); otherwise it stays Requested (`CapacityConfirmed=False`, `InsufficientCapacity`) and is looked at again.
  A Preemptible reservation is confirmed when the pool's capacity could hold it were nothing guaranteed (it may
  overbook the Guaranteed ones: `Overbooked`). Either class asking more GPUs than the pool has (0 GPUs, or no node
  in the pool) stays Requested (`InsufficientCapacity`, the message says what the pool has).
- **Reclaim.** While active, Preemptible reservations get what the active Guaranteed ones leave, oldest first; one
  that gets less than its count is `Reclaimed` (its borrowable Kueue quota shrinks accordingly).
- **Lifecycle.** Cancelled (annotation `billing.opendatahub.io/cancelled: <reason>`, final, `cancelledAt`) >
  Expired (after the window) > Active (in the window, confirmed) > Confirmed (before the window) > Requested.
- **Kueue.** Per tenant one ClusterQueue `billing-rsv-<ns>-<tenant>` in cohort `billing-reservations`, with one
  ResourceFlavor per pool (`billing-gpu-<region>-<product>`, nodeLabels selecting the pool): nominalQuota = the
  active Guaranteed GPUs, borrowingLimit = the active Preemptible GPUs not reclaimed. A lender ClusterQueue
  `billing-rsv-unreserved` in the cohort holds each pool's GPUs no active Guaranteed reservation holds, for no
  namespace: what Preemptible reservations borrow. Kueue itself reclaims borrowed capacity first
  (`reclaimWithinCohort`).
- **Charges.** `monthlyPrice` per UTC calendar month the window touches, prorated by the seconds of the month it
  covers: `monthlyPrice * covered / seconds in that month`, rounded once half-even to 6 places (`money.quantize`).
  A month's charge is due once its part of the window has begun (a reservation is billed regardless of
  utilisation); a cancelled reservation owes the months begun before `cancelledAt`; a reservation never confirmed
  owes nothing. Ledger key `reservation:<ns>/<name>:<YYYY-MM>`: charged once per month, whatever happens.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from maasctl.billing import money
from maasctl.billing.api.reservation import ReservationClass, ReservationState
from maasctl.billing.rules import names

__all__ = [
    "CANCELLED_ANNOTATION",
    "COHORT",
    "GPU",
    "LENDER_QUEUE",
    "PRODUCT_LABELS",
    "REGION_LABELS",
    "Admission",
    "Ask",
    "Pool",
    "Segment",
    "admit",
    "capacities",
    "due",
    "flavor_name",
    "lender_queue",
    "lifecycle",
    "month_segments",
    "next_transition",
    "peak",
    "queue_name",
    "reclaim",
    "reservation_flavor",
    "reservation_queue",
    "unreserved",
]

GPU: Final = "nvidia.com/gpu"
PRODUCT_LABELS: Final = ("billing.opendatahub.io/gpu-sku", "nvidia.com/gpu.product")
REGION_LABELS: Final = ("billing.opendatahub.io/geo", "topology.kubernetes.io/region")
CANCELLED_ANNOTATION: Final = "billing.opendatahub.io/cancelled"
COHORT: Final = "billing-reservations"
LENDER_QUEUE: Final = "billing-rsv-unreserved"
KUEUE_API: Final = "kueue.x-k8s.io/v1beta2"
SECOND: Final = timedelta(seconds=1)


@dataclass(frozen=True, order=True)
class Pool:
    geo: str
    sku: str

    @property
    def name(self) -> str:
        return f"{self.geo}/{self.sku}"


def _label(labels: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = labels.get(key)
        if value:
            return str(value)
    return None


def _gpus(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def capacities(nodes: Iterable[Mapping[str, Any]]) -> dict[Pool, int]:
    """GPUs per pool: allocatable nvidia.com/gpu of schedulable nodes carrying a product and a region label."""
    out: dict[Pool, int] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        sku, geo = _label(labels, PRODUCT_LABELS), _label(labels, REGION_LABELS)
        if sku is None or geo is None or (node.get("spec") or {}).get("unschedulable"):
            continue
        gpus = _gpus(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
        pool = Pool(geo, sku)
        out[pool] = out.get(pool, 0) + gpus
    return out


@dataclass(frozen=True)
class Ask:
    """A Reservation as admission sees it. `end` is exclusive (the window's end plus one second)."""

    key: str  # namespace/name
    pool: Pool
    count: int
    start: datetime
    end: datetime
    klass: ReservationClass
    order: tuple[str, str]  # (creationTimestamp, name): oldest first
    confirmed: bool = False  # confirmed before (kept ahead of new requests)
    live: bool = True  # not cancelled, not expired

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return self.start < end and start < self.end


def window_end(end: datetime) -> datetime:
    """The exclusive end of a window whose `end` names its last second."""
    return end + SECOND


def peak(asks: Iterable[Ask], start: datetime, end: datetime) -> int:
    """The most GPUs `asks` hold at the same instant within [start, end)."""
    points: list[tuple[datetime, int]] = []
    for a in asks:
        if a.overlaps(start, end):
            points += [(max(a.start, start), a.count), (min(a.end, end), -a.count)]
    best = current = 0
    for _, delta in sorted(points, key=lambda p: (p[0], p[1])):  # releases before takes at the same instant
        current += delta
        best = max(best, current)
    return best


@dataclass(frozen=True)
class Admission:
    available: bool
    reason: str
    message: str


def admit(capacity: int, asks: Sequence[Ask]) -> dict[str, Admission]:
    """Admission of one pool's live reservations (see the module docstring)."""
    out: dict[str, Admission] = {}
    held: list[Ask] = []
    for a in sorted((a for a in asks if a.live), key=lambda a: (not a.confirmed, a.order)):
        if a.count > capacity:  # every class: a pool that cannot ever hold it (0 GPUs, no such pool) refuses it
            out[a.key] = Admission(False, "InsufficientCapacity", _too_big(capacity, a))
            continue
        if a.klass == ReservationClass.PREEMPTIBLE:
            free = capacity - peak(held, a.start, a.end)
            fits = a.count <= free
            out[a.key] = Admission(True, "Preemptible" if fits else "Overbooked",
                                   f"preemptible: {max(free, 0)} of {capacity} GPU(s) of pool {a.pool.name} are not "
                                   f"guaranteed to others in the window" + ("" if fits else
                                                                              "; it may be reclaimed"))
            continue
        need = peak(held, a.start, a.end) + a.count
        if need <= capacity:
            held.append(a)
            out[a.key] = Admission(True, "CapacityAvailable",
                                   f"{a.count} GPU(s) guaranteed in pool {a.pool.name} ({need} of {capacity} at the "
                                   "busiest instant of the window)")
        else:
            out[a.key] = Admission(False, "InsufficientCapacity",
                                   f"pool {a.pool.name} has {capacity} GPU(s); Guaranteed reservations already hold "
                                   f"{need - a.count} at the busiest instant of the window, {a.count} more do not fit")
    return out


def _too_big(capacity: int, a: Ask) -> str:
    what = (f"pool {a.pool.name} has no GPUs: no schedulable node with allocatable {GPU} carries product "
            f"{a.pool.sku} and region {a.pool.geo} (labels {PRODUCT_LABELS[0]}, {REGION_LABELS[0]})") if capacity <= 0 \
        else f"pool {a.pool.name} has {capacity} GPU(s) in all"
    return f"{what}; this {a.klass.value} reservation asks {a.count}: it waits until the pool can hold it"


def reclaim(capacity: int, active: Sequence[Ask]) -> dict[str, int]:
    """GPUs each active Preemptible reservation of a pool really gets now: what the active Guaranteed ones leave,
    oldest first."""
    free = capacity - sum(a.count for a in active if a.klass == ReservationClass.GUARANTEED)
    out: dict[str, int] = {}
    for a in sorted((a for a in active if a.klass == ReservationClass.PREEMPTIBLE), key=lambda a: a.order):
        out[a.key] = max(0, min(a.count, free))
        free -= out[a.key]
    return out


def lifecycle(*, cancelled: bool, confirmed: bool, start: datetime, end: datetime, now: datetime
              ) -> ReservationState:
    """The state now (`end` exclusive)."""
    if cancelled:
        return ReservationState.CANCELLED
    if now >= end:
        return ReservationState.EXPIRED
    if not confirmed:
        return ReservationState.REQUESTED
    return ReservationState.ACTIVE if now >= start else ReservationState.CONFIRMED


@dataclass(frozen=True)
class Segment:
    month: str  # YYYY-MM
    start: datetime
    end: datetime
    amount: Decimal
    covered_seconds: int
    month_seconds: int


def _month_start(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def month_segments(start: datetime, end: datetime, monthly_price: Decimal) -> list[Segment]:
    """The window [start, end) cut at UTC month boundaries, each part with its prorated price."""
    out = []
    month = _month_start(start)
    while month < end:
        following = _next_month(month)
        seg_start, seg_end = max(start, month), min(end, following)
        covered = int((seg_end - seg_start) // SECOND)
        total = int((following - month) // SECOND)
        amount = money.quantize(money.CONTEXT.divide(monthly_price * covered, Decimal(total)))
        if covered > 0:
            out.append(Segment(month.strftime("%Y-%m"), seg_start, seg_end, amount, covered, total))
        month = following
    return out


def due(segments: Sequence[Segment], now: datetime, cancelled_at: datetime | None) -> list[Segment]:
    """The segments owed now: begun, and begun before a cancellation."""
    return [s for s in segments if s.start <= now and (cancelled_at is None or s.start < cancelled_at)]


def next_transition(start: datetime, end: datetime, segments: Sequence[Segment], now: datetime) -> datetime | None:
    """When the state or the charges change next (None: never again)."""
    times = [t for t in (start, end, *(s.start for s in segments)) if t > now]
    return min(times) if times else None


_NAME = re.compile(r"[^a-z0-9-]+")


def _dns(text: str) -> str:
    return _NAME.sub("-", text.lower()).strip("-") or "x"


def flavor_name(pool: Pool) -> str:
    """The ResourceFlavor of a pool (a stable hash keeps distinct pools distinct after sanitising)."""
    digest = hashlib.sha256(pool.name.encode()).hexdigest()[:6]
    return names.bounded(f"billing-gpu-{_dns(pool.geo)}-{_dns(pool.sku)}-{digest}", 253)


def queue_name(namespace: str, tenant: str) -> str:
    return names.bounded(f"billing-rsv-{namespace}-{tenant}", 253)


def _labels() -> dict[str, str]:
    return {names.MANAGED_BY_LABEL: names.MANAGED_BY, "app.kubernetes.io/part-of": "maasctl-billing",
            "app.kubernetes.io/component": "reservations"}


def reservation_flavor(pool: Pool) -> dict[str, Any]:
    """The ResourceFlavor scheduling a pool's workloads onto its nodes."""
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(pool), "labels": _labels()},
            "spec": {"nodeLabels": {PRODUCT_LABELS[0]: pool.sku, REGION_LABELS[0]: pool.geo}}}


def reservation_queue(namespace: str, tenant: str, organization: str,
                      quota: Mapping[Pool, tuple[int, int]]) -> dict[str, Any]:
    """The tenant's reservation ClusterQueue: per pool (guaranteed GPUs as nominalQuota, preemptible GPUs as
    borrowingLimit). An empty `quota` keeps the queue with no flavors' quota (nothing admitted)."""
    flavors = [{"name": flavor_name(pool), "resources": [
        {"name": GPU, "nominalQuota": guaranteed, "borrowingLimit": preemptible}]}
        for pool, (guaranteed, preemptible) in sorted(quota.items())]
    labels = _labels() | {names.TENANT_LABEL: names.label_value(tenant)}
    spec: dict[str, Any] = {
        "cohortName": COHORT,
        "namespaceSelector": {"matchLabels": {names.TENANT_LABEL: names.label_value(organization)}},
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}] if flavors else [],
    }
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": queue_name(namespace, tenant), "labels": labels}, "spec": spec}


def unreserved(capacity: Mapping[Pool, int], active: Iterable[Ask]) -> dict[Pool, int]:
    """GPUs of each pool that no active Guaranteed reservation holds (what Preemptible ones borrow)."""
    held: dict[Pool, int] = {}
    for a in active:
        if a.klass == ReservationClass.GUARANTEED:
            held[a.pool] = held.get(a.pool, 0) + a.count
    return {p: max(0, capacity.get(p, 0) - held.get(p, 0)) for p in sorted(set(capacity) | set(held))}


def lender_queue(free: Mapping[Pool, int]) -> dict[str, Any]:
    """The cohort's lender: each pool's unreserved GPUs as nominal quota, admitting no workload of its own (no
    namespaceSelector: Kueue's null selector selects no namespace), so tenants' queues borrow them."""
    flavors = [{"name": flavor_name(pool), "resources": [{"name": GPU, "nominalQuota": gpus}]}
               for pool, gpus in sorted(free.items())]
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": LENDER_QUEUE, "labels": _labels()},
            "spec": {"cohortName": COHORT,
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}] if flavors else []}}
