"""What the billing pages show, pure: rows built from the billing objects as the API server returns them (to the
signed-in user) and from the billing operator's metrics. Amounts stay the decimal strings they are, shown with
the currency of the tenant's PriceBook (`money`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from maasctl.console.billing.money import amount, currency_of, micros, quantity
from maasctl.console.billing.portal_views import Chart

__all__ = ["SUSPENDED_ANNOTATION", "SUSPENDED_BY_ANNOTATION", "Health", "RaterFigures", "Row", "budget_rows",
           "connector_rows", "health", "mtd_charts", "parse_metrics", "rater_figures", "reservation_rows",
           "tenant_rows"]

SUSPENDED_ANNOTATION: Final = "billing.opendatahub.io/suspended"  # the wallet's Suspended state (docs/billing.md)
SUSPENDED_BY_ANNOTATION: Final = "billing.opendatahub.io/suspended-by"  # who froze it, when (the console)


@dataclass(frozen=True)
class Row:
    """One object on a page: its key and the cells already formatted (strings), plus what the page links to."""

    namespace: str
    name: str
    cells: Mapping[str, str]
    problems: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or ()}


def _says(cond: Mapping[str, Any] | None) -> str:
    if cond is None:
        return ""
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    return f"{reason}: {message}" if message else reason


def tenant_currencies(tenants: Iterable[Mapping[str, Any]], plans: Sequence[Mapping[str, Any]],
                      books: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """`namespace/name` of each tenant -> its PriceBook's currency."""
    return {"/".join(_meta(t)): currency_of(t, plans, books) for t in tenants}


def tenant_problems(tenant: Mapping[str, Any]) -> tuple[str, ...]:
    """What a person on call looks at: stale balance, drift, unpriced usage, payment trouble."""
    conds = _conditions(tenant)
    out = []
    for type_, bad in (("BalanceStale", "True"), ("ReconcileDrift", "True"), ("UsagePriced", "False"),
                       ("PaymentMethodValid", "False"), ("PaymentDisputed", "True"),
                       ("PaymentCorroborationFailed", "True")):
        cond = conds.get(type_)
        if cond is not None and cond.get("status") == bad:
            out.append(f"{type_}: {_says(cond)}")
    return tuple(out)


def tenant_rows(tenants: Iterable[Mapping[str, Any]], currencies: Mapping[str, str | None]) -> list[Row]:
    rows = []
    for t in tenants:
        ns, name = _meta(t)
        spec, status = t.get("spec") or {}, t.get("status") or {}
        currency = currencies.get(f"{ns}/{name}")
        annotations = (t.get("metadata") or {}).get("annotations") or {}
        rows.append(Row(ns, name, {
            "display": str(spec.get("displayName") or name),
            "state": str(status.get("state") or "Pending"),
            "mode": str(spec.get("billingMode") or ""),
            "balance": amount(status.get("balance"), currency),
            "runway": "—" if not status.get("runwayDays") else f"{quantity(status.get('runwayDays'))} days",
            "mtd": amount(status.get("mtdSpend"), currency),
            "allowance": quantity(status.get("allowanceTokens")),
            "failures": str(int(status.get("consecutivePaymentFailures") or 0)),
            "currency": currency or "",
            "plan": str((spec.get("planRef") or {}).get("name") or ""),
            "balance_at": str(status.get("balanceObservedAt") or ""),
            "suspended": str(annotations.get(SUSPENDED_ANNOTATION) or ""),
            "suspended_by": str(annotations.get(SUSPENDED_BY_ANNOTATION) or ""),
        }, tenant_problems(t), {"conditions": list(status.get("conditions") or ()),
                                "mtd_micros": micros(status.get("mtdSpend")) or 0}))
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def mtd_charts(rows: Sequence[Row]) -> list[Chart]:
    """Month-to-date spend per tenant, one chart per currency (amounts of two currencies are never added)."""
    by: dict[str, list[tuple[str, int]]] = {}
    for r in rows:
        by.setdefault(r.cells["currency"], []).append((r.name, int(r.extra.get("mtd_micros") or 0)))
    return [Chart(points, currency or None) for currency, points in sorted(by.items())]


def budget_rows(budgets: Iterable[Mapping[str, Any]], currencies: Mapping[str, str | None]) -> list[Row]:
    rows = []
    for b in budgets:
        ns, name = _meta(b)
        spec, status = b.get("spec") or {}, b.get("status") or {}
        tenant = str((spec.get("tenantRef") or {}).get("name") or "")
        currency = currencies.get(f"{ns}/{tenant}")
        fired = {(int(f.get("capIndex", 0)), int(f.get("pct", 0))): str(f.get("firedAt") or "")
                 for f in status.get("firedThresholds") or ()}
        ends = {int(e.get("capIndex", 0)): str(e.get("periodEnd") or "") for e in status.get("capPeriodEnds") or ()}
        caps = []
        for i, cap in enumerate(spec.get("caps") or ()):
            caps.append({
                "amount": amount(cap.get("amount"), currency), "period": str(cap.get("period") or ""),
                "ends": ends.get(i, ""),
                "thresholds": [{"pct": int(th.get("pct", 0)), "action": str(th.get("action") or ""),
                                "fired": fired.get((i, int(th.get("pct", 0))), "")}
                               for th in cap.get("thresholds") or ()]})
        fired_cond = _conditions(b).get("ThresholdFired")
        rows.append(Row(ns, name, {
            "tenant": tenant, "spend": amount(status.get("currentSpend"), currency),
            "enforced": str((fired_cond or {}).get("reason") or ""),
            "selector": ", ".join(f"{k}={v}" for k, v in sorted(((spec.get("selector") or {}).get("keyLabels")
                                                                 or {}).items())),
        }, extra={"caps": caps}))
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def reservation_rows(reservations: Iterable[Mapping[str, Any]], currencies: Mapping[str, str | None]) -> list[Row]:
    rows = []
    for r in reservations:
        ns, name = _meta(r)
        spec, status = r.get("spec") or {}, r.get("status") or {}
        window = spec.get("window") or {}
        check = status.get("capacityCheck") or {}
        tenant = str(spec.get("tenantRef") or "")
        rows.append(Row(ns, name, {
            "tenant": tenant, "state": str(status.get("state") or "Requested"),
            "class": str(spec.get("class") or ""), "sku": str(spec.get("sku") or ""),
            "count": str(spec.get("count") or ""), "geo": str(spec.get("geo") or ""),
            "start": str(window.get("start") or ""), "end": str(window.get("end") or ""),
            "price": amount(spec.get("monthlyPrice"), currencies.get(f"{ns}/{tenant}") or "USD"),
            "capacity": ("" if not check else ("available" if check.get("available") else "not available")
                         + (f" in {check['pool']}" if check.get("pool") else "")),
            "why": _says(_conditions(r).get("CapacityConfirmed")),
        }))
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def connector_rows(connectors: Iterable[Mapping[str, Any]]) -> list[Row]:
    rows = []
    for c in connectors:
        ns, name = _meta(c)
        spec, status = c.get("spec") or {}, c.get("status") or {}
        sync, hooks = status.get("lastSync") or {}, status.get("webhookStats") or {}
        conds = _conditions(c)
        rows.append(Row(ns, name, {
            "type": str(spec.get("type") or ""), "connected": "yes" if status.get("connected") else "no",
            "last_sync": str(sync.get("at") or ""), "pushed": str(sync.get("pushedRecords", "")),
            "failed": str(sync.get("failed", "")), "received": str(hooks.get("received24h", "")),
            "signature_failures": str(hooks.get("signatureFailures", "")),
        }, tuple(f"{t}: {_says(conds[t])}" for t in ("CredentialsValid", "WebhookReachable", "SyncHealthy")
                 if t in conds and conds[t].get("status") == "False")))
    return sorted(rows, key=lambda r: (r.namespace, r.name))


# -- metering health ---------------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    """Prometheus text exposition -> {metric: [(labels, value text)]}; values stay text (no float)."""
    out: dict[str, list[tuple[dict[str, str], str]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: dict[str, str] = {}
        for part in rest.rstrip("}").split('",') if rest else ():
            key, _, val = part.partition('="')
            if key:
                labels[key.strip(", ")] = val.rstrip('"').replace('\\"', '"').replace("\\\\", "\\")
        out.setdefault(name.strip(), []).append((labels, value.strip()))
    return out


def _number(value: str | None) -> Decimal | None:
    try:
        return Decimal(value) if value is not None else None
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class RaterFigures:
    """The rater as the leading billing operator reports it."""

    leader: bool  # the replica that answered is the leader (or runs without leader election)
    rating: bool  # it exports the rater's figures (it rates: a ledger and a usage database)
    records_behind: str = ""
    oldest_unrated_seconds: str = ""
    seconds_since_progress: str = ""
    rated: Mapping[str, str] = field(default_factory=dict)
    unpriced: Mapping[str, str] = field(default_factory=dict)  # tenant ns/name -> records


def _whole(value: str | None) -> str:
    n = _number(value)
    return "" if n is None else quantity(str(n.to_integral_value()))


def rater_figures(metrics: Mapping[str, list[tuple[dict[str, str], str]]]) -> RaterFigures:
    leader_samples = metrics.get("leader_election_master_status") or []
    leader = not leader_samples or any(_number(v) == 1 for _, v in leader_samples)

    def one(name: str) -> str | None:
        samples = metrics.get(name) or []
        return samples[0][1] if samples else None

    return RaterFigures(
        leader=leader, rating="maasctl_billing_rater_records_behind" in metrics,
        records_behind=_whole(one("maasctl_billing_rater_records_behind")),
        oldest_unrated_seconds=_whole(one("maasctl_billing_rater_oldest_unrated_seconds")),
        seconds_since_progress=_whole(one("maasctl_billing_rater_seconds_since_progress")),
        rated={labels.get("result", ""): _whole(v) for labels, v in metrics.get("maasctl_billing_rated_records_total")
               or ()},
        unpriced={f"{labels.get('namespace')}/{labels.get('tenant')}": _whole(v)
                  for labels, v in metrics.get("maasctl_billing_unpriced_records_total") or ()})


@dataclass(frozen=True)
class Health:
    stale: list[Row]
    drift: list[Row]
    unpriced: list[Row]


def health(rows: Sequence[Row]) -> Health:
    def with_condition(type_: str, bad: str) -> list[Row]:
        return [r for r in rows if any(c.get("type") == type_ and c.get("status") == bad
                                       for c in r.extra.get("conditions") or ())]

    return Health(stale=with_condition("BalanceStale", "True"), drift=with_condition("ReconcileDrift", "True"),
                  unpriced=with_condition("UsagePriced", "False"))


def condition_text(row: Row, type_: str) -> str:
    return _says(next((c for c in row.extra.get("conditions") or () if c.get("type") == type_), None))
