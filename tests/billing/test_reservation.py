"""Reservation decisions (pure): pools from node labels, peak-not-sum admission of Guaranteed requests,
Preemptible overbooking and reclaim, the lifecycle, the Kueue queue and the prorated monthly charges."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing import money
from maasctl.billing.api.reservation import ReservationClass, ReservationState
from maasctl.billing.rules import reservation as rsv

G, P = ReservationClass.GUARANTEED, ReservationClass.PREEMPTIBLE
POOL = rsv.Pool("us-east", "h200")
SEP, OCT, NOV = (datetime(2026, m, 1, tzinfo=UTC) for m in (9, 10, 11))


def node(name: str, gpus: Any, sku: str | None = "h200", geo: str | None = "us-east", **extra: Any) -> dict[str, Any]:
    labels = {**({"nvidia.com/gpu.product": sku} if sku else {}),
              **({"topology.kubernetes.io/region": geo} if geo else {})}
    return {"metadata": {"name": name, "labels": labels}, "spec": extra,
            "status": {"allocatable": {"nvidia.com/gpu": gpus}}}


def ask(key: str, count: int, start: datetime, end: datetime, klass: ReservationClass = G, order: str = "",
        confirmed: bool = False) -> rsv.Ask:
    return rsv.Ask(key, POOL, count, start, end, klass, (order or key, key), confirmed)


def test_capacity_per_pool_from_node_labels() -> None:
    nodes = [node("a", "8"), node("b", 4), node("c", "8", unschedulable=True), node("d", "8", sku=None),
             node("e", "2", geo="eu-west"), node("f", "x"),
             {"metadata": {"name": "g", "labels": {"billing.opendatahub.io/gpu-sku": "h200",
                                                   "nvidia.com/gpu.product": "NVIDIA-H200",
                                                   "billing.opendatahub.io/geo": "us-east"}},
              "status": {"allocatable": {"nvidia.com/gpu": "1"}}}]
    assert rsv.capacities(nodes) == {POOL: 13, rsv.Pool("eu-west", "h200"): 2}


def test_the_second_overlapping_guaranteed_request_is_refused_capacity() -> None:
    first, second = ask("ns/a", 6, SEP, OCT, order="1"), ask("ns/b", 4, SEP + timedelta(days=10), NOV, order="2")
    out = rsv.admit(8, [second, first])
    assert out["ns/a"].available and not out["ns/b"].available
    assert out["ns/b"].reason == "InsufficientCapacity" and "6" in out["ns/b"].message
    # Windows that only touch do not overlap; the peak, not the sum, of overlapping windows counts.
    back_to_back = [ask("ns/a", 8, SEP, OCT, order="1"), ask("ns/b", 8, OCT, NOV, order="2")]
    assert all(a.available for a in rsv.admit(8, back_to_back).values())
    staggered = [ask("ns/a", 5, SEP, SEP + timedelta(days=10), order="1"),
                 ask("ns/b", 5, SEP + timedelta(days=10), OCT, order="2"),
                 ask("ns/c", 3, SEP, OCT, order="3")]
    assert all(a.available for a in rsv.admit(8, staggered).values())


def test_a_confirmed_reservation_is_never_displaced_by_an_older_request() -> None:
    older, confirmed = ask("ns/old", 8, SEP, OCT, order="1"), ask("ns/new", 8, SEP, OCT, order="2", confirmed=True)
    out = rsv.admit(8, [older, confirmed])
    assert out["ns/new"].available and not out["ns/old"].available


def test_preemptible_overbooks_and_is_reclaimed_first() -> None:
    g, p1 = ask("ns/g", 6, SEP, OCT, order="1"), ask("ns/p1", 2, SEP, OCT, P, "2")
    p2 = ask("ns/p2", 4, SEP, OCT, P, "3")
    out = rsv.admit(8, [g, p1, p2])
    assert out["ns/p1"].reason == "Preemptible" and out["ns/p2"].reason == "Overbooked"
    assert all(a.available for a in out.values())
    assert rsv.reclaim(8, [g, p1, p2]) == {"ns/p1": 2, "ns/p2": 0}
    assert rsv.reclaim(8, [p1, p2]) == {"ns/p1": 2, "ns/p2": 4}
    # Preemptible never takes capacity from a later Guaranteed request.
    assert rsv.admit(8, [ask("ns/p", 8, SEP, OCT, P, "1"), ask("ns/g", 8, SEP, OCT, G, "2")])["ns/g"].available


def test_capacity_is_checked_for_every_class() -> None:
    """A pool with 0 GPUs (or none at all) confirms nothing, Preemptible included; nor does a pool smaller than
    the request, whatever the class. Preemptible still overbooks what Guaranteed ones hold."""
    for klass in (G, P):
        for capacity in (0, 3):
            out = rsv.admit(capacity, [ask("ns/a", 4, SEP, OCT, klass)])["ns/a"]
            assert not out.available and out.reason == "InsufficientCapacity", (klass, capacity)
            assert "asks 4" in out.message and klass.value in out.message
        assert "has no GPUs" in rsv.admit(0, [ask("ns/a", 1, SEP, OCT, klass)])["ns/a"].message
        assert rsv.admit(4, [ask("ns/a", 4, SEP, OCT, klass)])["ns/a"].available
    overbooked = rsv.admit(4, [ask("ns/g", 4, SEP, OCT, G, "1"), ask("ns/p", 4, SEP, OCT, P, "2")])["ns/p"]
    assert overbooked.available and overbooked.reason == "Overbooked"


def test_lifecycle_from_the_window_and_the_clock() -> None:
    end = OCT
    def at(now: datetime, **kw: Any) -> ReservationState:
        return rsv.lifecycle(**{"cancelled": False, "confirmed": True, "start": SEP, "end": end, "now": now, **kw})
    assert at(SEP - timedelta(seconds=1)) == ReservationState.CONFIRMED
    assert at(SEP) == ReservationState.ACTIVE
    assert at(OCT - timedelta(seconds=1)) == ReservationState.ACTIVE
    assert at(OCT) == ReservationState.EXPIRED
    assert at(SEP, confirmed=False) == ReservationState.REQUESTED
    assert at(OCT, confirmed=False) == ReservationState.EXPIRED
    assert at(SEP, cancelled=True) == ReservationState.CANCELLED
    assert at(OCT, cancelled=True) == ReservationState.CANCELLED


def test_the_seeds_window_is_one_whole_month() -> None:
    end = rsv.window_end(datetime(2026, 9, 30, 23, 59, 59, tzinfo=UTC))
    segments = rsv.month_segments(SEP, end, Decimal("12000"))
    assert [(s.month, s.amount) for s in segments] == [("2026-09", Decimal("12000.000000"))]


def test_partial_months_are_prorated_by_seconds() -> None:
    start = datetime(2026, 9, 16, tzinfo=UTC)  # half of September (30 days)
    end = datetime(2026, 11, 11, 0, 0, tzinfo=UTC)  # ten days of November
    segments = rsv.month_segments(start, end, Decimal("3000"))
    assert [(s.month, s.amount) for s in segments] == [
        ("2026-09", Decimal("1500.000000")), ("2026-10", Decimal("3000.000000")), ("2026-11", Decimal("1000.000000"))]
    # A third of a 31-day month, rounded once, half-even, to 6 places.
    third = rsv.month_segments(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 11, 8, tzinfo=UTC),
                               Decimal("100"))
    assert third[0].amount == money.quantize(Decimal("100") * (10 * 86400 + 8 * 3600) / Decimal(31 * 86400))


@given(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)),
       st.integers(min_value=1, max_value=800 * 86400),
       st.decimals(min_value=0, max_value=10**9, places=6, allow_nan=False, allow_infinity=False))
def test_segments_tile_the_window_and_never_charge_more_than_their_months(start: datetime, seconds: int,
                                                                       price: Decimal) -> None:
    start = start.replace(microsecond=0)
    end = start + timedelta(seconds=seconds)
    segments = rsv.month_segments(start, end, price)
    assert segments[0].start == start and segments[-1].end == end
    assert all(a.end == b.start for a, b in itertools.pairwise(segments))
    assert sum(s.covered_seconds for s in segments) == seconds
    assert all(Decimal(0) <= s.amount <= price for s in segments)
    assert all(isinstance(s.amount, Decimal) for s in segments)


def test_charges_are_due_once_their_month_has_begun() -> None:
    segments = rsv.month_segments(datetime(2026, 9, 16, tzinfo=UTC), NOV + timedelta(days=10), Decimal("3000"))
    assert rsv.due(segments, datetime(2026, 9, 15, tzinfo=UTC), None) == []
    assert [s.month for s in rsv.due(segments, datetime(2026, 9, 16, tzinfo=UTC), None)] == ["2026-09"]
    assert [s.month for s in rsv.due(segments, OCT, None)] == ["2026-09", "2026-10"]
    # Cancelled in October: September and October are owed, November never.
    assert [s.month for s in rsv.due(segments, NOV, OCT + timedelta(days=3))] == ["2026-09", "2026-10"]
    assert rsv.next_transition(SEP, OCT, segments, datetime(2026, 9, 20, tzinfo=UTC)) == OCT


def test_the_tenant_queue_holds_guaranteed_as_nominal_and_preemptible_as_borrowable() -> None:
    q = rsv.reservation_queue("ns", "ten-helix", "helix", {POOL: (6, 2)})
    assert q["metadata"]["name"] == "billing-rsv-ns-ten-helix" and q["spec"]["cohortName"] == rsv.COHORT
    (group,) = q["spec"]["resourceGroups"]
    assert group["flavors"] == [{"name": rsv.flavor_name(POOL), "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 6, "borrowingLimit": 2}]}]
    assert q["spec"]["namespaceSelector"] == {"matchLabels": {"billing.opendatahub.io/tenant": "helix"}}
    flavor = rsv.reservation_flavor(POOL)
    assert flavor["spec"]["nodeLabels"] == {"billing.opendatahub.io/gpu-sku": "h200",
                                            "billing.opendatahub.io/geo": "us-east"}
    assert rsv.flavor_name(rsv.Pool("us-east", "H200/MIG:3g")) != rsv.flavor_name(rsv.Pool("us-east", "h200-mig-3g"))
    assert rsv.reservation_queue("ns", "t", "o", {})["spec"]["resourceGroups"] == []


def test_the_lender_queue_holds_what_no_active_guaranteed_reservation_holds() -> None:
    other = rsv.Pool("eu-west", "h100")
    active = [ask("g", 6, SEP, OCT), ask("p", 4, SEP, OCT, ReservationClass.PREEMPTIBLE),
              dataclasses.replace(ask("x", 3, SEP, OCT), pool=other)]
    free = rsv.unreserved({POOL: 8, other: 2}, active)
    assert free == {other: 0, POOL: 2}  # never below zero (nodes may go away)
    q = rsv.lender_queue(free)
    assert q["metadata"]["name"] == rsv.LENDER_QUEUE and q["spec"]["cohortName"] == rsv.COHORT
    assert "namespaceSelector" not in q["spec"]  # Kueue's null selector: no workload of its own
    assert q["spec"]["resourceGroups"][0]["flavors"] == [
        {"name": rsv.flavor_name(other), "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 0}]},
        {"name": rsv.flavor_name(POOL), "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]
    assert rsv.lender_queue({})["spec"]["resourceGroups"] == []
