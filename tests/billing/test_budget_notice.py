"""The signed webhook of a budget firing (pure): a stable event id per firing, a body whose money is decimal
strings (never a float), the threshold's actions with Notify first, and a bounded retry backoff."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

from maasctl.billing.api.budget import BudgetCap
from maasctl.billing.rules import budget, budget_notice

T0 = datetime(2026, 9, 17, 15, 30, tzinfo=UTC)


def test_the_event_id_is_stable_per_firing_and_differs_between_firings() -> None:
    start, _ = budget.period_bounds(BudgetCap.model_validate(
        {"amount": "10", "period": "Daily", "thresholds": [{"pct": 50, "action": "Notify"}]}).period, T0)
    key = budget.firing_key("ns/rag", 0, 50, start)
    assert budget_notice.event_id(key) == budget_notice.event_id(key)
    assert budget_notice.event_id(key).startswith("budget-") and len(budget_notice.event_id(key)) <= 64
    assert budget_notice.event_id(key) != budget_notice.event_id(budget.firing_key("ns/rag", 0, 80, start))
    next_day = budget.firing_key("ns/rag", 0, 50, start.replace(day=18))
    assert budget_notice.event_id(key) != budget_notice.event_id(next_day)


def test_the_body_names_the_budget_threshold_action_period_and_money_as_decimal_strings() -> None:
    cap = BudgetCap.model_validate({"amount": "1.00", "period": "Daily", "thresholds": [
        {"pct": 50, "action": "Notify"}, {"pct": 80, "action": "Throttle"}]})
    ev = budget.evaluate([cap], [Decimal("0.85")], T0, [])
    cap_eval = ev.caps[0]
    data = budget_notice.threshold_fired(
        namespace="tenants", budget="rag", tenant="tenants/ten-helix", cap_index=0, period=cap.period.value,
        period_start=cap_eval.period_start, period_end=cap_eval.period_end, pct=80,
        actions=[a.value for a in cap_eval.actions(80)], spend=cap_eval.spend, cap=cap.amount)
    assert data == {
        "budget": {"namespace": "tenants", "name": "rag"}, "tenant": "tenants/ten-helix", "capIndex": 0,
        "period": "Daily",
        "periodStart": "2026-09-17T00:00:00Z", "periodEnd": "2026-09-18T00:00:00Z", "thresholdPct": 80,
        "action": "Throttle", "actions": ["Notify", "Throttle"], "currentSpend": "0.850000", "cap": "1.00"}
    text = json.dumps(data)
    assert json.loads(text, parse_float=lambda _: (_ for _ in ()).throw(AssertionError("a float")))["cap"] == "1.00"


def test_a_notify_threshold_has_notify_as_its_action() -> None:
    cap = BudgetCap.model_validate({"amount": "2", "period": "Monthly", "thresholds": [
        {"pct": 50, "action": "Notify"}]})
    ev = budget.evaluate([cap], [Decimal("1.000001")], T0, [])
    c = ev.caps[0]
    data = budget_notice.threshold_fired(
        namespace="n", budget="b", tenant="t", cap_index=0, period="Monthly", period_start=c.period_start,
        period_end=c.period_end, pct=50, actions=[a.value for a in c.actions(50)], spend=c.spend, cap=cap.amount)
    assert data["action"] == "Notify" and data["actions"] == ["Notify"]
    assert data["currentSpend"] == "1.000001" and data["periodStart"] == "2026-09-01T00:00:00Z"


def test_backoff_doubles_and_is_capped() -> None:
    assert [budget_notice.backoff_seconds(n) for n in (0, 1, 2, 3)] == [2, 2, 4, 8]
    assert budget_notice.backoff_seconds(9) == budget_notice.MAX_BACKOFF_SECONDS
    assert budget_notice.backoff_seconds(10_000) == budget_notice.MAX_BACKOFF_SECONDS
