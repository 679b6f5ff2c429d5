"""GPU metering: a pure function from a Kueue Workload (and what the ledger already charged for it) to the GPU
time still to charge, and from that time and the PriceBook in force to a rated line. No clock, no cluster, no
database (docs/billing.md, "GPU metering").

The rule:

- **What counts.** A Workload's GPU time runs from its `Admitted` condition turning True (its pods may start) to
  the first sign that admission ended: `Finished` True, `Evicted` True (preemption, a stopped queue, a failed
  check: Kueue evicts), `Admitted` or `QuotaReserved` False, or the Workload's deletion. The quantity is what
  it was admitted with: `status.admission.podSetAssignments[*].resourceUsage["nvidia.com/gpu"]` (the total of
  the pod set, Kueue's own number; a Kubernetes quantity, read exactly, so `500m` is half a GPU). A pod set
  without GPUs, a Workload never admitted, and the time spent waiting in a queue cost nothing.
- **Segments.** Each pod set of each admission is charged in segments that follow each other without gap or
  overlap: the first from the admission, each next from where the previous ended. A running Workload is charged
  a segment up to now when it is first seen (so its admission is on record even if Kueue later clears it) and
  then whenever a whole `interval` has passed; the segment that reaches the admission's end is the last one
  (`final`). A re-admitted (requeued) Workload starts a new chain at its new admission time: what ran before the
  eviction is never charged again, the time in the queue never.
- **Natural key** `gpu:<workload uid>:<pod set index>:<segment start, epoch seconds>`: a segment is charged once
  whatever its end; a pass that crashed before committing is redone from the ledger's state.
- **SKU.** The ResourceFlavor the GPUs were admitted on names the SKU: its label `billing.opendatahub.io/gpu-sku`,
  else its `spec.nodeLabels` `billing.opendatahub.io/gpu-sku` or `nvidia.com/gpu.product` (how Reservation pools
  name products); its region from the same places (`billing.opendatahub.io/geo`, `topology.kubernetes.io/region`),
  else the tenant's. Nothing the tenant writes on its Workload chooses the price.
- **Price.** `rating.rate` on that SKU's `gpu_seconds` rate only (in its unit: per-gpu-second|minute|hour; the
  SKU's other dimensions do not apply to GPU time), with the PriceBook in force at the segment's end; no volume
  tier or committed use (those count tokens).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from maasctl.billing import money
from maasctl.billing.rules import rating

__all__ = [
    "GPU",
    "GPU_SKU_LABEL",
    "Admission",
    "Charged",
    "PodSetGPUs",
    "Segment",
    "Workload",
    "flavor_sku",
    "gpu_seconds",
    "plain",
    "quantity",
    "rate_segment",
    "segment_key",
    "segments",
    "workload_of",
]

GPU: Final = "nvidia.com/gpu"
GPU_SKU_LABEL: Final = "billing.opendatahub.io/gpu-sku"
GEO_LABEL: Final = "billing.opendatahub.io/geo"
_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
_REGION_LABEL: Final = "topology.kubernetes.io/region"
_QUANTITY: Final = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?\d+))?$")
_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# A condition whose transition (at or after an admission) ends that admission's GPU time.
_ENDS: Final = (("Finished", "True"), ("Evicted", "True"), ("Admitted", "False"), ("QuotaReserved", "False"))


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (`2`, `"500m"`, `"1k"`, `"1Ki"`, `"1e3"`) as an exact Decimal."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a resource quantity")
    m = _QUANTITY.match(str(value).strip())
    if m is None:
        raise ValueError(f"{value!r} is not a resource quantity")
    sign, digits, binary, dec, exp = m.groups()
    number = Decimal(digits if not digits.startswith(".") else "0" + digits)
    if binary:
        number = money.CONTEXT.multiply(number, Decimal(1024) ** _BINARY[binary])
    elif exp is not None:
        number = number.scaleb(int(exp), context=money.CONTEXT)
    else:
        number = number.scaleb(_DECIMAL[dec or ""], context=money.CONTEXT)
    return -number if sign == "-" else number


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _epoch(t: datetime) -> int:
    return int(t.timestamp())


@dataclass(frozen=True)
class PodSetGPUs:
    index: int
    name: str
    flavor: str  # the ResourceFlavor of nvidia.com/gpu ("" when the assignment names none)
    gpus: Decimal


@dataclass(frozen=True)
class Admission:
    cluster_queue: str
    admitted_at: datetime
    podsets: tuple[PodSetGPUs, ...]


@dataclass(frozen=True)
class Workload:
    uid: str
    namespace: str
    name: str
    admission: Admission | None  # the current one (Admitted True with status.admission)
    transitions: tuple[tuple[str, str, datetime], ...] = ()  # (type, status, lastTransitionTime)
    deleting_at: datetime | None = None  # metadata.deletionTimestamp: its pods are being stopped
    resource_version: str = ""

    def ended(self, after: datetime) -> datetime | None:
        """When an admission that began at `after` ended, if the conditions (or the deletion) say so."""
        times = [t for typ, status, t in self.transitions if (typ, status) in _ENDS and t >= after]
        if self.deleting_at is not None and self.deleting_at >= after:
            times.append(self.deleting_at)
        return min(times) if times else None

    def settled(self, now: datetime, *, running_covered: bool = False) -> bool:
        """No admission runs (or the one that runs is covered by a Reservation) and every transition is in the
        past: until the object changes, time alone makes nothing due (an eviction stamped after `now` will)."""
        stamps = [t for _, _, t in self.transitions] + ([self.deleting_at] if self.deleting_at else [])
        if any(t > now for t in stamps):
            return False
        if self.admission is None or running_covered:
            return True
        end = self.ended(self.admission.admitted_at)
        return end is not None and end <= now


def workload_of(obj: Mapping[str, Any]) -> Workload:
    """A Workload (kueue.x-k8s.io/v1beta2) as metering needs it. Raises ValueError when its admission cannot be
    read (a GPU quantity that is no quantity): such a Workload is reported, never guessed at."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    transitions: list[tuple[str, str, datetime]] = []
    for c in status.get("conditions") or ():
        t = _time(c.get("lastTransitionTime"))
        if t is not None:
            transitions.append((str(c.get("type")), str(c.get("status")), t))
    admitted = next((t for typ, st, t in transitions if typ == "Admitted" and st == "True"), None)
    raw = status.get("admission")
    admission = None
    if admitted is not None and isinstance(raw, Mapping) and raw.get("clusterQueue"):
        podsets = []
        for i, psa in enumerate(raw.get("podSetAssignments") or ()):
            usage = psa.get("resourceUsage") or {}
            gpus = quantity(usage[GPU]) if GPU in usage else Decimal(0)
            if gpus < 0:
                raise ValueError(f"pod set {psa.get('name', 'main')} was admitted with {gpus} GPUs")
            podsets.append(PodSetGPUs(i, str(psa.get("name") or "main"), str((psa.get("flavors") or {}).get(GPU, "")),
                                      gpus))
        admission = Admission(str(raw["clusterQueue"]), admitted, tuple(podsets))
    return Workload(str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", "")),
                    admission, tuple(transitions), _time(meta.get("deletionTimestamp")),
                    str(meta.get("resourceVersion", "")))


@dataclass(frozen=True)
class Charged:
    """The last segment the ledger holds for one pod set of one admission (from the line's details)."""

    admitted_at: datetime
    podset: int
    podset_name: str
    flavor: str
    gpus: Decimal
    cluster_queue: str
    end: datetime
    final: bool


def segment_key(uid: str, podset: int, start: datetime) -> str:
    return f"gpu:{uid}:{podset}:{_epoch(start)}"


def gpu_seconds(gpus: Decimal, start: datetime, end: datetime) -> Decimal:
    """GPUs x the seconds of [start, end), exactly (whole microseconds)."""
    d = end - start
    micros = (d.days * 86400 + d.seconds) * 10**6 + d.microseconds
    return money.CONTEXT.multiply(gpus, Decimal(micros).scaleb(-6, context=money.CONTEXT))


@dataclass(frozen=True)
class Segment:
    uid: str
    namespace: str
    workload: str
    cluster_queue: str
    podset: int
    podset_name: str
    flavor: str
    gpus: Decimal
    admitted_at: datetime
    start: datetime
    end: datetime
    final: bool

    @property
    def key(self) -> str:
        return segment_key(self.uid, self.podset, self.start)

    @property
    def gpu_seconds(self) -> Decimal:
        return gpu_seconds(self.gpus, self.start, self.end)

    def details(self) -> dict[str, Any]:
        """What the ledger keeps of the segment (strings, ints and bools), enough to continue its chain."""
        return {"workload": {"namespace": self.namespace, "name": self.workload, "uid": self.uid},
                "clusterQueue": self.cluster_queue, "podSet": self.podset, "podSetName": self.podset_name,
                "flavor": self.flavor, "gpus": plain(self.gpus), "admittedAt": _iso(self.admitted_at),
                "start": _iso(self.start), "end": _iso(self.end), "final": self.final,
                "gpuSeconds": plain(self.gpu_seconds)}


def plain(d: Decimal) -> str:
    """`d` without exponent or trailing zeros (`3600`, `0.5`): how GPU quantities are written down."""
    text = format(d.normalize(context=money.CONTEXT), "f")
    return text


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def charged_of(details: Mapping[str, Any]) -> Charged | None:
    """A segment's details back (None when the line is not a GPU segment's)."""
    try:
        admitted, end = _time(details["admittedAt"]), _time(details["end"])
        if admitted is None or end is None:
            return None
        return Charged(admitted, int(details["podSet"]), str(details.get("podSetName", "")),
                       str(details.get("flavor", "")), Decimal(str(details["gpus"])),
                       str(details.get("clusterQueue", "")), end, bool(details.get("final")))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


def last_charged(charged: Sequence[Charged]) -> dict[tuple[datetime, int], Charged]:
    """The latest segment per (admission, pod set)."""
    out: dict[tuple[datetime, int], Charged] = {}
    for c in charged:
        k = (c.admitted_at, c.podset)
        if k not in out or (c.end, c.final) > (out[k].end, out[k].final):
            out[k] = c
    return out


def segments(wl: Workload, charged: Mapping[tuple[datetime, int], Charged], now: datetime,
             interval: timedelta) -> list[Segment]:
    """The segments of `wl` to charge now, given the last charged segment per (admission, pod set)."""
    now = now.replace(microsecond=0)
    out: list[Segment] = []
    current = wl.admission
    if current is not None:
        end = wl.ended(current.admitted_at)
        for ps in current.podsets:
            if ps.gpus == 0:
                continue
            prev = charged.get((current.admitted_at, ps.index))
            if prev is not None and prev.final:
                continue
            start = prev.end if prev is not None else current.admitted_at
            stop = end if end is not None and end <= now else None
            if stop is not None:
                if stop > start:
                    out.append(_segment(wl, current.cluster_queue, ps.index, ps.name, ps.flavor, ps.gpus,
                                        current.admitted_at, start, stop, True))
            elif now > start and (prev is None or now - start >= interval):
                out.append(_segment(wl, current.cluster_queue, ps.index, ps.name, ps.flavor, ps.gpus,
                                    current.admitted_at, start, now, False))
    # Earlier admissions whose end we have not charged yet (evicted, finished, or their admission cleared).
    for (admitted_at, podset), prev in sorted(charged.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if prev.final or (current is not None and admitted_at == current.admitted_at):
            continue
        end = wl.ended(admitted_at)
        if current is not None and end is not None and end > current.admitted_at:
            end = None  # that evidence is about the current admission: this one's end is unknown
        if end is None or min(end, now) <= prev.end:
            continue  # nothing known beyond what is charged (never more than the evidence), or not yet
        out.append(_segment(wl, prev.cluster_queue, podset, prev.podset_name, prev.flavor, prev.gpus, admitted_at,
                            prev.end, min(end, now), end <= now))
    return out


def _segment(wl: Workload, cq: str, index: int, name: str, flavor: str, gpus: Decimal, admitted: datetime,
             start: datetime, end: datetime, final: bool) -> Segment:
    return Segment(wl.uid, wl.namespace, wl.name, cq, index, name, flavor, gpus, admitted, start, end, final)


def flavor_sku(flavor: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """(SKU, region) a ResourceFlavor names: its labels first, then the node labels it selects."""
    if flavor is None:
        return None, ""
    labels = (flavor.get("metadata") or {}).get("labels") or {}
    node = (flavor.get("spec") or {}).get("nodeLabels") or {}
    sku = labels.get(GPU_SKU_LABEL) or node.get(GPU_SKU_LABEL) or node.get(_PRODUCT_LABEL)
    geo = labels.get(GEO_LABEL) or node.get(GEO_LABEL) or node.get(_REGION_LABEL) or ""
    return (str(sku) if sku else None), str(geo)


def rate_segment(seg: Segment, sku_name: str, geo: str, book: rating.Book,
                 provider_costs: Mapping[str, Mapping[str, Decimal]] | None = None
                 ) -> rating.RatedLine | rating.Unpriced:
    """Price `seg`'s GPU seconds with the `gpu_seconds` rate of the SKU `sku_name` (in `geo`, else the default
    region) of `book`, through `rating.rate` (same rounding, same pass-through rule)."""
    sku = rating.find_sku(book.spec, sku_name, geo)
    if sku is None or "gpu_seconds" not in sku.rates:
        what = "no SKU" if sku is None else f"SKU {sku.sku} prices no gpu_seconds:"
        where = f" in region {geo!r} or the default region" if geo else ""
        return rating.Unpriced(seg.key, sku_name, book.name,
                               f"{what} PriceBook {book.name} prices GPU SKU {sku_name!r}{where}"
                               if sku is None else f"{what} PriceBook {book.name} cannot price GPU time of it")
    only = sku.model_copy(update={"rates": {"gpu_seconds": sku.rates["gpu_seconds"]}})
    spec = book.spec.model_copy(update={"skus": [only], "volume_tiers": None, "committed_use": None})
    costs = {name: {d: v for d, v in c.items() if d == "gpu_seconds"} for name, c in (provider_costs or {}).items()}
    usage = rating.Usage(record_id=seg.key, time=seg.end, model=sku.sku, gpu_seconds=seg.gpu_seconds)
    return rating.rate(usage, rating.Book(book.name, book.generation, spec),
                       rating.Context(geo=sku.geo or geo, provider_costs=costs))
