"""BudgetPolicy decisions, pure: periods, thresholds, what fires and what is enforced (no clock, no I/O).

The rule (docs/billing.md, "Budgets"):

- **Periods** are UTC calendar periods, one per cap: `Daily` [00:00, next 00:00), `Weekly` from Monday 00:00,
  `Monthly` from the 1st 00:00. Each cap has its own period end (`status.capPeriodEnds`).
- **Spend** of a cap is the tenant's rated usage (ledger usage charges) with its record time in the cap's
  period; with `selector.keyLabels`, only the usage of API keys carrying all of those labels.
- **A threshold is reached** when `spend * 100 >= pct * amount` (exact Decimal arithmetic, no division).
- **Firing**: each reached threshold fires once per period of its cap (`status.firedThresholds`; an entry fired
  before the cap's current period started is dropped: reset on rollover). Every firing notifies (an Event; the
  signed webhook `budget_notice` when the tenant has a BillingConnector: recorded with the claim, delivered by the
  psp-connector to a `webhook` connector); Notify always fires alongside Throttle and Freeze.
- **Enforcement** is what the reached thresholds say now, the strongest across caps: Freeze > Throttle. It lasts
  while spend is over the threshold: the period rolls over (spend starts at zero) or the cap is raised, and it
  lifts. Notifications do not repeat within a period.
- **Throttle** limits the matching keys together to `throttled_tokens_per_minute(plan)`: a tenth of the Plan's
  `tokensPerMinute`, never below `THROTTLE_FLOOR_TOKENS_PER_MINUTE` (the floor alone when the Plan has no
  per-minute token limit). **Freeze** refuses them with 403 naming the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import IntEnum
from typing import Any, Final

from maasctl.billing import money
from maasctl.billing.api.budget import BudgetCap, BudgetPeriod, ThresholdAction

__all__ = [
    "ENFORCEMENT_REASONS",
    "THROTTLE_DIVISOR",
    "THROTTLE_FLOOR_TOKENS_PER_MINUTE",
    "CapEvaluation",
    "Evaluation",
    "Fired",
    "Severity",
    "evaluate",
    "fired_of_status",
    "firing_key",
    "freeze_message",
    "matches",
    "period_bounds",
    "reached",
    "selector_text",
    "severity_of_reason",
    "throttled_tokens_per_minute",
]

THROTTLE_DIVISOR: Final = 10
"""Throttle divides the Plan's tokensPerMinute by this (integer division)."""
THROTTLE_FLOOR_TOKENS_PER_MINUTE: Final = 1000
"""The least a throttled budget's keys may use per minute, together."""


class Severity(IntEnum):
    """What a budget enforces now, weakest first."""

    NONE = 0
    NOTIFY = 1
    THROTTLE = 2
    FREEZE = 3


_OF_ACTION: Final = {ThresholdAction.NOTIFY: Severity.NOTIFY, ThresholdAction.THROTTLE: Severity.THROTTLE,
                     ThresholdAction.FREEZE: Severity.FREEZE}
ENFORCEMENT_REASONS: Final = {Severity.FREEZE: "Frozen", Severity.THROTTLE: "Throttled", Severity.NOTIFY: "Notified",
                              Severity.NONE: "NoneFired"}
"""The reason of the `ThresholdFired` condition for each severity in force: the Plan reconciler reads it."""


def severity_of_reason(reason: str | None) -> Severity:
    for sev, name in ENFORCEMENT_REASONS.items():
        if name == reason:
            return sev
    return Severity.NONE


def period_bounds(period: BudgetPeriod, now: datetime) -> tuple[datetime, datetime]:
    """The UTC period of `period` containing `now`: [start, end)."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAILY:
        return day, day + timedelta(days=1)
    if period == BudgetPeriod.WEEKLY:
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def reached(cap: BudgetCap, spend: Decimal) -> list[int]:
    """The pcts of `cap`'s thresholds that `spend` has reached, ascending."""
    return sorted(t.pct for t in cap.thresholds if spend * 100 >= cap.amount * t.pct)


def matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """An API key with `labels` is covered by a budget with `selector` (None or empty: every key, and tokens)."""
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def firing_key(budget: str, cap_index: int, pct: int, period_start: datetime) -> str:
    """The natural key of one firing: once per budget, cap, threshold and period."""
    return f"budget:{budget}:{cap_index}:{pct}:{period_start.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


@dataclass(frozen=True)
class Fired:
    cap_index: int
    pct: int
    fired_at: datetime


@dataclass(frozen=True)
class CapEvaluation:
    index: int
    cap: BudgetCap
    period_start: datetime
    period_end: datetime
    spend: Decimal
    reached: tuple[int, ...]
    severity: Severity

    def actions(self, pct: int) -> list[ThresholdAction]:
        """What the threshold `pct` does when it fires (Notify is always part of it)."""
        action = next(t.action for t in self.cap.thresholds if t.pct == pct)
        return [ThresholdAction.NOTIFY] if action == ThresholdAction.NOTIFY else [ThresholdAction.NOTIFY, action]


@dataclass(frozen=True)
class Evaluation:
    caps: tuple[CapEvaluation, ...]
    kept: tuple[Fired, ...]
    """Firings of the current periods already recorded (in status)."""
    new: tuple[tuple[CapEvaluation, int], ...]
    """(cap, pct) reached now and not recorded as fired in this period: to fire (once)."""
    severity: Severity
    """What is enforced now (the strongest reached threshold across caps)."""

    @property
    def next_transition(self) -> datetime:
        return min(c.period_end for c in self.caps)

    @property
    def current_spend(self) -> Decimal:
        return self.caps[-1].spend


def evaluate(caps: Sequence[BudgetCap], spends: Sequence[Decimal], now: datetime,
             fired: Iterable[Fired]) -> Evaluation:
    """Decide for each cap its period, reached thresholds and severity, which firings stay (current period),
    and which thresholds fire now. `spends[i]` is cap i's spend in its current period."""
    if len(caps) != len(spends):
        raise ValueError("one spend per cap")
    evals = []
    for i, (cap, spend) in enumerate(zip(caps, spends, strict=True)):
        start, end = period_bounds(cap.period, now)
        pcts = reached(cap, spend)
        sev = max((_OF_ACTION[t.action] for t in cap.thresholds if t.pct in pcts), default=Severity.NONE)
        evals.append(CapEvaluation(i, cap, start, end, spend, tuple(pcts), sev))
    valid = {(c.index, t.pct) for c in evals for t in c.cap.thresholds}
    kept = tuple(sorted({(f.cap_index, f.pct): f for f in fired
                         if (f.cap_index, f.pct) in valid and f.fired_at >= evals[f.cap_index].period_start
                         }.values(), key=lambda f: (f.cap_index, f.pct)))
    done = {(f.cap_index, f.pct) for f in kept}
    new = tuple((c, pct) for c in evals for pct in c.reached if (c.index, pct) not in done)
    return Evaluation(tuple(evals), kept, new, max((c.severity for c in evals), default=Severity.NONE))


def throttled_tokens_per_minute(plan_tokens_per_minute: int | None) -> int:
    """The tokens per minute a Throttle leaves the budget's keys, together."""
    if plan_tokens_per_minute is None:
        return THROTTLE_FLOOR_TOKENS_PER_MINUTE
    return max(THROTTLE_FLOOR_TOKENS_PER_MINUTE, plan_tokens_per_minute // THROTTLE_DIVISOR)


def selector_text(selector: Mapping[str, str] | None) -> str:
    if not selector:
        return "every API key of the tenant"
    return "API keys labelled " + ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def freeze_message(namespace: str, budget: str, tenant: str, caps: Sequence[CapEvaluation]) -> str:
    """The 403 text of a frozen budget: which budget, why, until when, how to lift it. Stable within a period
    (no spend), so the generated policy changes only when the freeze starts or ends."""
    frozen = [c for c in caps if c.severity == Severity.FREEZE]
    why = "; ".join(f"its {c.cap.period.value} cap of {money.fmt(c.cap.amount)} is reached "
                    f"(period ends {c.period_end.strftime('%Y-%m-%dT%H:%M:%SZ')})" for c in frozen)
    return (f"billing budget {namespace}/{budget} of tenant {tenant} has frozen this API key: {why}. Requests are "
            "refused until the period ends or an administrator raises the cap (kubectl edit budgetpolicy)")


def fired_of_status(status: Mapping[str, Any] | None) -> list[Fired]:
    """The firings recorded in a BudgetPolicy status (unreadable entries are ignored)."""
    out = []
    for item in (status or {}).get("firedThresholds") or ():
        try:
            when = datetime.fromisoformat(str(item["firedAt"]).replace("Z", "+00:00"))
            out.append(Fired(int(item["capIndex"]), int(item["pct"]), when.astimezone(UTC)))
        except (KeyError, TypeError, ValueError):
            continue
    return out
