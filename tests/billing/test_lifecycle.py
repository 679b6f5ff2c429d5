"""The PriceBook lifecycle as a pure function of books, tenants and time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing.api import PriceBookState as S
from maasctl.billing.controller.timers import seconds_until
from maasctl.billing.rules.lifecycle import Book, TenantUse, book_in_use, evaluate

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)

OLD = Book("v1", created=T0, effective_from=T0 + 30 * DAY, notice_days=30)
NEW = Book("v2", created=T0 + 40 * DAY, effective_from=T0 + 80 * DAY, notice_days=30, supersedes="v1")
FOLLOWER = TenantUse("follower", plan_book="v1")
PINNED = TenantUse("pinned", pin="v1", plan_book="v1")


def test_draft_when_notice_is_too_short_and_never_active() -> None:
    short = Book("v1", created=T0, effective_from=T0 + 10 * DAY, notice_days=30)
    for now in (T0, T0 + 11 * DAY, T0 + 400 * DAY):
        life = evaluate("v1", [short], [], now)
        assert life.state == S.DRAFT and not life.notice_valid and life.next_transition is None
    assert "2026-01-31T00:00:00Z or later" in evaluate("v1", [short], [], T0).message


def test_announced_until_effective_from_then_active() -> None:
    life = evaluate("v1", [OLD], [], T0 + DAY)
    assert life.state == S.ANNOUNCED and life.next_transition == OLD.effective_from
    life = evaluate("v1", [OLD], [FOLLOWER], OLD.effective_from)
    assert life.state == S.ACTIVE and life.active_tenants == 1 and life.next_transition is None


def test_active_book_waits_for_its_announced_successor() -> None:
    life = evaluate("v1", [OLD, NEW], [FOLLOWER], T0 + 50 * DAY)
    assert life.state == S.ACTIVE and life.next_transition == NEW.effective_from


def test_superseded_while_pinned_tenants_stay_then_retired() -> None:
    now = NEW.effective_from
    life = evaluate("v1", [OLD, NEW], [FOLLOWER, PINNED], now)
    assert life.state == S.SUPERSEDED and life.superseded_by == "v2"
    assert life.grandfathered == ("pinned",) and life.active_tenants == 1
    assert evaluate("v2", [OLD, NEW], [FOLLOWER, PINNED], now).active_tenants == 1  # the follower moved on
    unpinned = TenantUse("pinned", plan_book="v1")
    assert evaluate("v1", [OLD, NEW], [FOLLOWER, unpinned], now).state == S.RETIRED


def test_retired_is_final() -> None:
    retired = Book(**{**OLD.__dict__, "state": S.RETIRED})
    assert evaluate("v1", [retired], [PINNED], T0 + 500 * DAY).state == S.RETIRED


def test_successor_without_notice_never_supersedes() -> None:
    hasty = Book("v2", created=T0 + 40 * DAY, effective_from=T0 + 41 * DAY, notice_days=30, supersedes="v1")
    life = evaluate("v1", [OLD, hasty], [FOLLOWER], T0 + 100 * DAY)
    assert life.state == S.ACTIVE and life.next_transition is None


def test_followers_track_the_chain_and_announced_books_are_not_used() -> None:
    books = {b.name: b for b in (OLD, NEW)}
    assert book_in_use(FOLLOWER, books, T0) is None  # nothing in force yet
    assert book_in_use(FOLLOWER, books, T0 + 31 * DAY) == "v1"
    assert book_in_use(FOLLOWER, books, T0 + 81 * DAY) == "v2"
    assert book_in_use(PINNED, books, T0 + 81 * DAY) == "v1"
    assert book_in_use(TenantUse("nobody"), books, T0 + 81 * DAY) is None


def test_a_supersedes_cycle_does_not_loop() -> None:
    a = Book("a", created=T0, effective_from=T0, notice_days=0, supersedes="b")
    b = Book("b", created=T0, effective_from=T0 + DAY, notice_days=0, supersedes="a")
    assert book_in_use(TenantUse("t", plan_book="a"), {"a": a, "b": b}, T0 + 2 * DAY) in ("a", "b")


@given(st.integers(min_value=0, max_value=200))
def test_state_only_moves_forward_as_time_passes(days: int) -> None:
    order = [S.DRAFT, S.ANNOUNCED, S.ACTIVE, S.SUPERSEDED, S.RETIRED]
    tenants = [FOLLOWER, PINNED]
    before = evaluate("v1", [OLD, NEW], tenants, T0 + days * DAY).state
    after = evaluate("v1", [OLD, NEW], tenants, T0 + (days + 1) * DAY).state
    assert order.index(after) >= order.index(before)


def test_requeue_delay_is_whole_seconds_rounded_up() -> None:
    assert seconds_until(T0, T0 + timedelta(seconds=90, microseconds=1)) == 91
    assert seconds_until(T0, T0 - DAY) == 1
