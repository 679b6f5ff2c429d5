"""GPU metering is pure: the segments of a Kueue Workload's GPU time (not admitted, running, finished, evicted,
re-admitted, zero GPUs, fractional quantities, several pod sets) and their price by the seed's per-gpu-second
SKU through rating."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from maasctl.billing.api.pricebook import PriceBookSpec
from maasctl.billing.rules import gpu_metering as gm
from maasctl.billing.rules.rating import Book, RatedLine, Unpriced

T0 = datetime(2026, 9, 10, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
CQ = "billing-tenants-ten-helix"


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(*, admitted: datetime | None = None, gpus: Any = 2, conditions: tuple[tuple[str, str, datetime], ...]
             = (), podsets: list[dict[str, Any]] | None = None, admission: bool = True) -> dict[str, Any]:
    conds = [{"type": t, "status": s, "lastTransitionTime": iso(at), "reason": "R", "message": ""}
             for t, s, at in conditions]
    status: dict[str, Any] = {"conditions": conds}
    if admitted is not None:
        conds.append({"type": "Admitted", "status": "True", "lastTransitionTime": iso(admitted), "reason": "Admitted",
                      "message": ""})
        conds.append({"type": "QuotaReserved", "status": "True", "lastTransitionTime": iso(admitted),
                      "reason": "QuotaReserved", "message": ""})
        if admission:
            status["admission"] = {"clusterQueue": CQ, "podSetAssignments": podsets or [
                {"name": "main", "count": 1, "flavors": {gm.GPU: "billing-gpu"}, "resourceUsage": {gm.GPU: gpus}}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "train", "namespace": "team", "uid": "0b3c5f9e-8d1a-4c7e-9f2b-1a2b3c4d5e6f"},
            "status": status}


def charged(segs: list[gm.Segment]) -> dict[tuple[datetime, int], gm.Charged]:
    """What the ledger would hold after charging `segs` (read back from their details, as the meter does)."""
    out = [gm.charged_of(s.details()) for s in segs]
    return gm.last_charged([c for c in out if c is not None])


def test_quantities_are_read_exactly() -> None:
    assert gm.quantity(2) == 2
    assert gm.quantity("2") == 2
    assert gm.quantity("500m") == Decimal("0.5")
    assert gm.quantity("1.5") == Decimal("1.5")
    assert gm.quantity("1k") == 1000
    assert gm.quantity("1Ki") == 1024
    assert gm.quantity("2e2") == 200
    for bad in ("two", "1.2.3", "", True, 1.5, None):
        with pytest.raises(ValueError):
            gm.quantity(bad)


def test_not_yet_admitted_costs_nothing() -> None:
    wl = gm.workload_of(workload(conditions=(("QuotaReserved", "False", T0),)))
    assert wl.admission is None
    assert gm.segments(wl, {}, T0 + 5 * HOUR, HOUR) == []


def test_a_running_workload_is_charged_when_first_seen_then_every_interval() -> None:
    wl = gm.workload_of(workload(admitted=T0))
    first = gm.segments(wl, {}, T0 + timedelta(seconds=90, microseconds=400), HOUR)
    assert [(s.start, s.end, s.final, s.gpu_seconds) for s in first] == [
        (T0, T0 + timedelta(seconds=90), False, Decimal(180))]
    held = charged(first)
    assert gm.segments(wl, held, T0 + 30 * timedelta(minutes=1), HOUR) == []  # less than an interval since
    second = gm.segments(wl, held, T0 + timedelta(seconds=90) + HOUR, HOUR)
    assert [(s.start, s.end, s.final) for s in second] == [(T0 + timedelta(seconds=90),
                                                             T0 + timedelta(seconds=90) + HOUR, False)]
    assert second[0].key == f"gpu:{wl.uid}:0:{int(second[0].start.timestamp())}"
    # The same segment computed later (a pass that crashed before committing) has the same key.
    later = gm.segments(wl, held, T0 + 3 * HOUR, HOUR)
    assert later[0].key == second[0].key and later[0].end == T0 + 3 * HOUR


def test_a_finished_workload_gets_its_last_segment_to_the_finish_and_nothing_after() -> None:
    done = T0 + timedelta(minutes=150)
    wl = gm.workload_of(workload(admitted=T0, conditions=(("Finished", "True", done),)))
    never_seen = gm.segments(wl, {}, T0 + 10 * HOUR, HOUR)
    assert [(s.start, s.end, s.final, s.gpu_seconds) for s in never_seen] == [(T0, done, True, Decimal(2 * 9000))]
    first = gm.segments(gm.workload_of(workload(admitted=T0)), {}, T0 + HOUR, HOUR)
    rest = gm.segments(wl, charged(first), T0 + 10 * HOUR, HOUR)
    assert [(s.start, s.end, s.final) for s in rest] == [(T0 + HOUR, done, True)]
    assert gm.segments(wl, charged(first + rest), T0 + 11 * HOUR, HOUR) == []
    # Altogether exactly admission to finish.
    assert sum((s.gpu_seconds for s in first + rest), Decimal(0)) == Decimal(2 * 150 * 60)


def test_an_evicted_workload_is_charged_to_its_eviction_even_once_kueue_cleared_the_admission() -> None:
    evicted = T0 + timedelta(minutes=20)
    first = gm.segments(gm.workload_of(workload(admitted=T0)), {}, T0 + timedelta(minutes=5), HOUR)
    # Kueue evicted it (preempted) and cleared status.admission; Admitted is False since the eviction.
    wl = gm.workload_of(workload(conditions=(("Evicted", "True", evicted), ("Preempted", "True", evicted),
                                             ("Admitted", "False", evicted), ("QuotaReserved", "False", evicted))))
    assert wl.admission is None
    tail = gm.segments(wl, charged(first), T0 + 2 * HOUR, HOUR)
    assert [(s.start, s.end, s.final, s.cluster_queue, s.gpus) for s in tail] == [
        (T0 + timedelta(minutes=5), evicted, True, CQ, Decimal(2))]
    assert gm.segments(wl, charged(first + tail), T0 + 3 * HOUR, HOUR) == []
    # An eviction the meter never saw the admission of has nothing on record: nothing is invented.
    assert gm.segments(wl, {}, T0 + 2 * HOUR, HOUR) == []


def test_a_readmitted_workload_is_charged_per_admission_never_twice_and_never_for_the_queue_wait() -> None:
    evicted, again = T0 + timedelta(minutes=30), T0 + timedelta(minutes=50)
    first = gm.segments(gm.workload_of(workload(admitted=T0)), {}, T0 + timedelta(minutes=10), HOUR)
    wl = gm.workload_of(workload(admitted=again, conditions=(("Evicted", "True", evicted),
                                                             ("Requeued", "True", evicted))))
    segs = gm.segments(wl, charged(first), again + timedelta(minutes=1), HOUR)
    assert sorted((s.admitted_at, s.start, s.end, s.final) for s in segs) == [
        (T0, T0 + timedelta(minutes=10), evicted, True),  # the first admission, to its eviction
        (again, again, again + timedelta(minutes=1), False),  # the new one, from its own admission
    ]
    assert len({s.key for s in first + segs}) == 3
    total = sum((s.gpu_seconds for s in first + segs), Decimal(0))
    assert total == Decimal(2 * (30 + 1) * 60)  # 30 min + 1 min: the 20 min in the queue cost nothing
    # Kueue flipped Evicted back to False at the re-admission: the first admission's end is unknown, so nothing
    # beyond what was charged is added (and the current admission is unaffected).
    flipped = gm.workload_of(workload(admitted=again, conditions=(("Evicted", "False", again),)))
    segs = gm.segments(flipped, charged(first), again + timedelta(minutes=1), HOUR)
    assert [(s.admitted_at, s.start) for s in segs] == [(again, again)]


def test_zero_gpus_and_fractional_and_several_pod_sets() -> None:
    assert gm.segments(gm.workload_of(workload(admitted=T0, gpus=0)), {}, T0 + HOUR, HOUR) == []
    cpu_only = workload(admitted=T0, podsets=[{"name": "main", "count": 1, "flavors": {"cpu": "default"},
                                               "resourceUsage": {"cpu": "4"}}])
    assert gm.segments(gm.workload_of(cpu_only), {}, T0 + HOUR, HOUR) == []
    half = gm.segments(gm.workload_of(workload(admitted=T0, gpus="500m")), {}, T0 + HOUR, HOUR)
    assert half[0].gpu_seconds == Decimal(1800)
    two = workload(admitted=T0, podsets=[
        {"name": "driver", "count": 1, "flavors": {gm.GPU: "a100"}, "resourceUsage": {gm.GPU: "1", "cpu": "2"}},
        {"name": "workers", "count": 4, "flavors": {gm.GPU: "h200-mig"}, "resourceUsage": {gm.GPU: "8"}}])
    segs = gm.segments(gm.workload_of(two), {}, T0 + HOUR, HOUR)
    assert [(s.podset, s.podset_name, s.flavor, s.gpu_seconds) for s in segs] == [
        (0, "driver", "a100", Decimal(3600)), (1, "workers", "h200-mig", Decimal(8 * 3600))]
    with pytest.raises(ValueError):
        gm.workload_of(workload(admitted=T0, gpus="lots"))
    with pytest.raises(ValueError):
        gm.workload_of(workload(admitted=T0, gpus="-1"))


def test_the_flavor_names_the_sku_and_region() -> None:
    assert gm.flavor_sku(None) == (None, "")
    assert gm.flavor_sku({"metadata": {"name": "billing-gpu", "labels": {gm.GPU_SKU_LABEL: "h200-mig-3g.40gb",
                                                                       "billing.opendatahub.io/geo": "us-east"}},
                          "spec": {}}) == ("h200-mig-3g.40gb", "us-east")
    pool = {"metadata": {"name": "p"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "h200",
                                                               "topology.kubernetes.io/region": "eu-west"}}}
    assert gm.flavor_sku(pool) == ("h200", "eu-west")
    assert gm.flavor_sku({"metadata": {"name": "plain"}, "spec": {}}) == (None, "")


def book(*skus: dict[str, Any]) -> Book:
    spec = {"currency": "USD", "effectiveFrom": "2026-09-01T00:00:00Z", "noticeDays": 0,
            "volumeTiers": [{"thresholdTokens": 0, "discountPct": "50"}],
            "skus": list(skus) or [{"sku": "h200-mig-3g.40gb", "unit": "per-gpu-second",
                                    "rates": {"gpu_seconds": "0.001250", "requests": "1"}}]}
    return Book("pb-standard", 2, PriceBookSpec.model_validate(spec))


def test_segments_are_priced_by_the_skus_gpu_seconds_rate_only() -> None:
    seg = gm.segments(gm.workload_of(workload(admitted=T0, gpus=3)), {}, T0 + HOUR, HOUR)[0]
    line = gm.rate_segment(seg, "h200-mig-3g.40gb", "", book())
    assert isinstance(line, RatedLine), line
    # 3 GPUs x 3600 s x 0.001250: no request charge, no token volume discount on GPU time.
    assert line.amount == Decimal("13.500000") and line.currency == "USD"
    assert [c.dimension for c in line.components] == ["gpu_seconds"]
    assert line.record_id == seg.key and line.sku == "h200-mig-3g.40gb"
    hourly = book({"sku": "h200", "unit": "per-gpu-hour", "rates": {"gpu_seconds": "4.20"}},
                  {"sku": "h200", "geo": "eu-west", "unit": "per-gpu-hour", "rates": {"gpu_seconds": "5.00"}})
    eu = gm.rate_segment(seg, "h200", "eu-west", hourly)
    us = gm.rate_segment(seg, "h200", "us-east", hourly)
    assert isinstance(eu, RatedLine) and eu.amount == Decimal("15.000000") and eu.geo == "eu-west"
    assert isinstance(us, RatedLine) and us.amount == Decimal("12.600000") and us.geo == ""
    missing = gm.rate_segment(seg, "b200", "", book())
    assert isinstance(missing, Unpriced) and "b200" in missing.reason
    tokens_only = gm.rate_segment(seg, "llama", "", book({"sku": "llama", "unit": "per-1M-tokens",
                                                          "rates": {"prompt_tokens": "1"}}))
    assert isinstance(tokens_only, Unpriced) and "gpu_seconds" in tokens_only.reason


def test_an_eviction_stamped_after_now_charges_nothing_yet() -> None:
    """A clock behind the Workload's conditions (or Kueue's clock ahead) never makes an empty or reversed
    segment: the tail is charged once the eviction is in the past."""
    first = gm.segments(gm.workload_of(workload(admitted=T0)), {}, T0 + timedelta(minutes=10), HOUR)
    evicted = T0 + timedelta(minutes=20)
    wl = gm.workload_of(workload(conditions=(("Evicted", "True", evicted), ("Admitted", "False", evicted))))
    assert gm.segments(wl, charged(first), T0 + timedelta(minutes=10), HOUR) == []
    assert not wl.settled(T0 + timedelta(minutes=10))  # time will make its tail due: the meter looks again
    assert gm.segments(wl, charged(first), T0 + timedelta(minutes=5), HOUR) == []
    tail = gm.segments(wl, charged(first), T0 + timedelta(minutes=30), HOUR)
    assert [(s.start, s.end, s.final) for s in tail] == [(T0 + timedelta(minutes=10), evicted, True)]
    assert tail[0].details()["gpuSeconds"] == "1200" and tail[0].details()["gpus"] == "2"


def test_a_deleted_workload_ends_at_its_deletion_and_settles() -> None:
    gone = T0 + timedelta(minutes=40)
    obj = workload(admitted=T0)
    obj["metadata"]["deletionTimestamp"] = iso(gone)  # Kueue's finalizer still holds it
    wl = gm.workload_of(obj)
    first = gm.segments(gm.workload_of(workload(admitted=T0)), {}, T0 + timedelta(minutes=10), HOUR)
    assert not wl.settled(T0 + timedelta(minutes=30))
    tail = gm.segments(wl, charged(first), T0 + HOUR, HOUR)
    assert [(s.start, s.end, s.final) for s in tail] == [(T0 + timedelta(minutes=10), gone, True)]
    assert wl.settled(T0 + HOUR) and gm.segments(wl, charged(first + tail), T0 + 2 * HOUR, HOUR) == []
    assert not gm.workload_of(workload(admitted=T0)).settled(T0 + HOUR)  # running: time makes segments due
    assert gm.workload_of(workload()).settled(T0)
