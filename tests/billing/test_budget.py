"""BudgetPolicy decisions (pure): UTC periods, thresholds reached exactly at pct x amount, firing once per
period and reset on rollover, the strongest action in force, the throttle rate and the key selector."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing.api.budget import BudgetCap, BudgetPeriod
from maasctl.billing.rules import budget
from maasctl.billing.rules.budget import Fired, Severity, evaluate, period_bounds, reached

T0 = datetime(2026, 9, 17, 15, 30, tzinfo=UTC)  # a Thursday


def cap(amount: str, period: str = "Monthly", **thresholds: str) -> BudgetCap:
    return BudgetCap.model_validate({"amount": amount, "period": period, "thresholds": [
        {"pct": int(p.removeprefix("p")), "action": a} for p, a in thresholds.items()]})


def test_periods_are_utc_calendar_periods() -> None:
    assert period_bounds(BudgetPeriod.DAILY, T0) == (datetime(2026, 9, 17, tzinfo=UTC),
                                                     datetime(2026, 9, 18, tzinfo=UTC))
    assert period_bounds(BudgetPeriod.WEEKLY, T0) == (datetime(2026, 9, 14, tzinfo=UTC),
                                                      datetime(2026, 9, 21, tzinfo=UTC))
    assert period_bounds(BudgetPeriod.MONTHLY, T0) == (datetime(2026, 9, 1, tzinfo=UTC),
                                                       datetime(2026, 10, 1, tzinfo=UTC))
    assert period_bounds(BudgetPeriod.MONTHLY, datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC))[1] == \
        datetime(2027, 1, 1, tzinfo=UTC)
    # A time in another zone is the same instant: 2026-09-18 01:00 +02:00 is still the 17th in UTC.
    from datetime import timezone
    assert period_bounds(BudgetPeriod.DAILY, datetime(2026, 9, 18, 1, 0, tzinfo=timezone(timedelta(hours=2))))[0] \
        == datetime(2026, 9, 17, tzinfo=UTC)


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
       st.sampled_from(list(BudgetPeriod)))
def test_a_period_contains_its_instant_and_the_next_starts_where_it_ends(when: datetime, period: BudgetPeriod) -> None:
    start, end = period_bounds(period, when)
    assert start <= when < end
    assert period_bounds(period, end)[0] == end
    assert period_bounds(period, start - timedelta(microseconds=1))[1] == start


def test_a_threshold_is_reached_exactly_at_pct_of_the_amount() -> None:
    c = cap("30000", p80="Notify", p100="Throttle")
    assert reached(c, Decimal("23999.999999")) == []
    assert reached(c, Decimal("24000")) == [80]
    assert reached(c, Decimal("29999.999999")) == [80]
    assert reached(c, Decimal("30000.000000")) == [80, 100]
    assert reached(cap("0", p1="Freeze"), Decimal(0)) == [1]  # a zero cap is reached at once


def test_fires_once_per_period_and_resets_on_rollover() -> None:
    caps = [cap("100", "Daily", p50="Notify", p100="Freeze")]
    first = evaluate(caps, [Decimal("60")], T0, [])
    assert [(c.index, p) for c, p in first.new] == [(0, 50)] and first.severity == Severity.NOTIFY
    fired = [Fired(0, 50, T0)]
    again = evaluate(caps, [Decimal("70")], T0 + timedelta(minutes=5), fired)
    assert again.new == () and again.kept == tuple(fired)
    frozen = evaluate(caps, [Decimal("100")], T0 + timedelta(minutes=6), fired)
    assert [p for _, p in frozen.new] == [100] and frozen.severity == Severity.FREEZE
    # The next day: spend starts again, the old firings are dropped, nothing is enforced.
    tomorrow = evaluate(caps, [Decimal(0)], T0 + timedelta(days=1), [*fired, Fired(0, 100, T0)])
    assert tomorrow.kept == () and tomorrow.new == () and tomorrow.severity == Severity.NONE
    assert tomorrow.caps[0].period_end == datetime(2026, 9, 19, tzinfo=UTC)


def test_caps_have_their_own_periods_and_the_strongest_action_wins() -> None:
    caps = [cap("1000", "Monthly", p100="Throttle"), cap("50", "Daily", p100="Freeze"),
            cap("300", "Weekly", p90="Notify")]
    ev = evaluate(caps, [Decimal("1000"), Decimal("10"), Decimal("280")], T0, [])
    assert ev.severity == Severity.THROTTLE
    assert [c.period_end for c in ev.caps] == [datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 9, 18, tzinfo=UTC),
                                              datetime(2026, 9, 21, tzinfo=UTC)]
    assert ev.next_transition == datetime(2026, 9, 18, tzinfo=UTC)
    assert ev.current_spend == Decimal("280")  # the last-evaluated cap's, as the seed says
    assert evaluate(caps, [Decimal("1000"), Decimal("50"), Decimal(0)], T0, []).severity == Severity.FREEZE
    # A firing of a threshold that no longer exists (the spec changed) is dropped.
    assert evaluate(caps, [Decimal(0)] * 3, T0, [Fired(0, 42, T0), Fired(7, 100, T0)]).kept == ()


def test_raising_the_cap_lifts_enforcement_without_firing_again() -> None:
    fired = [Fired(0, 100, T0)]
    ev = evaluate([cap("200", "Daily", p100="Freeze")], [Decimal("150")], T0, fired)
    assert ev.severity == Severity.NONE and ev.new == () and ev.kept == tuple(fired)


def test_notify_always_fires_alongside_throttle_and_freeze() -> None:
    ev = evaluate([cap("10", "Daily", p50="Notify", p80="Throttle", p100="Freeze")], [Decimal("10")], T0, [])
    c = ev.caps[0]
    assert [[a.value for a in c.actions(p)] for p in c.reached] == [["Notify"], ["Notify", "Throttle"],
                                                                  ["Notify", "Freeze"]]


def test_throttle_rate_is_a_tenth_of_the_plan_never_below_the_floor() -> None:
    assert budget.throttled_tokens_per_minute(2_000_000) == 200_000
    assert budget.throttled_tokens_per_minute(5_000) == budget.THROTTLE_FLOOR_TOKENS_PER_MINUTE
    assert budget.throttled_tokens_per_minute(None) == budget.THROTTLE_FLOOR_TOKENS_PER_MINUTE


def test_selector_matches_keys_carrying_every_label() -> None:
    sel = {"project": "rag", "env": "prod"}
    assert budget.matches(sel, {"project": "rag", "env": "prod", "team": "x"})
    assert not budget.matches(sel, {"project": "rag"})
    assert not budget.matches(sel, {"project": "RAG", "env": "prod"})  # exact, case-sensitive
    assert not budget.matches(sel, {"project": "rag ", "env": "prod"})
    assert budget.matches(None, {}) and budget.matches({}, {"a": "b"})


def test_firing_keys_are_per_budget_cap_threshold_and_period() -> None:
    start = period_bounds(BudgetPeriod.DAILY, T0)[0]
    keys = {budget.firing_key("ns/b", c, p, s) for c in (0, 1) for p in (50, 100)
            for s in (start, start + timedelta(days=1))}
    assert len(keys) == 8 and all(k.startswith("budget:ns/b:") for k in keys)


def test_status_round_trip_ignores_garbage() -> None:
    status = {"firedThresholds": [{"capIndex": 0, "pct": 80, "firedAt": "2026-09-17T10:00:00Z"},
                                  {"capIndex": "x"}, {"pct": 3}]}
    assert budget.fired_of_status(status) == [Fired(0, 80, datetime(2026, 9, 17, 10, tzinfo=UTC))]
    assert budget.severity_of_reason("Frozen") == Severity.FREEZE and budget.severity_of_reason(None) == Severity.NONE
