"""The signed webhook of a budget firing, pure: its event id, type and body (no clock, no I/O).

A firing (one budget, cap, threshold and period: `budget.firing_key`) that its controller claimed, for a tenant
with a `billingConnectorRef`, is recorded as a notice in the ledger database in the same transaction as the
claim; the psp-connector, which holds the connector's `hmacSecret`, POSTs it when the connector is of type
`webhook` (signed as every outbound event: `rules.signing`). Delivery is at least once: the event `id` (and
the `Idempotency-Key` header) is derived from the firing key, the same on every retry, so a receiver that
deduplicates by it sees each firing once. Money is a decimal string, never a float.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final

from maasctl.billing import money

__all__ = ["EVENT_TYPE", "MAX_BACKOFF_SECONDS", "backoff_seconds", "event_id", "threshold_fired"]

EVENT_TYPE: Final = "budget.threshold_fired"
MAX_BACKOFF_SECONDS: Final = 300


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_id(firing_key: str) -> str:
    """The stable id of a firing's event (also its Idempotency-Key): the same for every delivery attempt."""
    return "budget-" + hashlib.sha256(firing_key.encode()).hexdigest()[:32]


def threshold_fired(*, namespace: str, budget: str, tenant: str, cap_index: int, period: str, period_start: datetime,
                    period_end: datetime, pct: int, actions: list[str], spend: Decimal, cap: Decimal
                    ) -> dict[str, object]:
    """The `data` of a `budget.threshold_fired` event. `actions` is what the threshold does (Notify first, then
    Throttle or Freeze when that is its action); `action` is the strongest of them."""
    return {
        "budget": {"namespace": namespace, "name": budget},
        "tenant": tenant,
        "capIndex": cap_index,
        "period": period,
        "periodStart": _rfc3339(period_start),
        "periodEnd": _rfc3339(period_end),
        "thresholdPct": pct,
        "action": actions[-1],
        "actions": list(actions),
        "currentSpend": money.fmt(money.quantize(spend)),
        "cap": money.fmt(cap),
    }


def backoff_seconds(attempts: int) -> int:
    """Wait before the next delivery attempt after `attempts` failed ones: 2, 4, 8 ... capped at 5 minutes."""
    return int(min(MAX_BACKOFF_SECONDS, 2 ** max(1, min(attempts, 16))))
