"""The billing pages' pure parts: money shown from decimal strings (never a float), the tenant's currency, the
rows each page shows, the operator's metrics, the flags; and no float anywhere in the billing pages' code."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import maasctl.console.billing
from maasctl.cli import build_parser
from maasctl.console.billing import views
from maasctl.console.billing.money import amount, currency_of, quantity
from maasctl.console.cli import settings_from_args
from tests.billing.test_no_float import float_uses

NS = "tenants"


@pytest.mark.parametrize(("value", "currency", "shown"), [
    ("0.050075", "USD", "0.050075 USD"),
    ("1", "USD", "1.00 USD"),
    ("25000.000000", "EUR", "25,000.00 EUR"),
    ("-1234.5", "USD", "-1,234.50 USD"),
    ("-0.000000", "USD", "0.00 USD"),
    ("1234567890123456789012.123456", "GBP", "1,234,567,890,123,456,789,012.123456 GBP"),  # beyond a float
    ("1500", "JPY", "1,500 JPY"),
    ("0.5", None, "0.50"),
    (None, "USD", "—"),
    ("", "USD", "—"),
])
def test_amounts_as_written_with_their_currency(value: Any, currency: str | None, shown: str) -> None:
    assert amount(value, currency) == shown


@pytest.mark.parametrize("value", ["1e3", "1.2345678", " 1", "1.", "abc", "0x10", 1.5, True, "1,000", "+1"])
def test_anything_else_is_not_guessed(value: Any) -> None:
    assert amount(value, "USD") == "(unreadable)"


def test_quantities() -> None:
    assert quantity("7700000") == "7,700,000"
    assert quantity("21.600") == "21.6"
    assert quantity(None) == "—"


def _obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": kind, "metadata": meta, "spec": spec, "status": status or {}}


BOOKS = [_obj("PriceBook", "pb-usd", {"currency": "USD"}, {"state": "Superseded"}),
         _obj("PriceBook", "pb-eur", {"currency": "EUR", "supersedes": "pb-usd"}, {"state": "Active"}),
         _obj("PriceBook", "pb-gbp", {"currency": "GBP", "supersedes": "pb-eur"}, {"state": "Announced"}),
         _obj("PriceBook", "pb-jpy", {"currency": "JPY"}, {"state": "Active"})]
PLANS = [_obj("Plan", "basic", {"priceBookRef": "pb-usd"}), _obj("Plan", "none", {})]


def test_currency_of_the_book_in_use() -> None:
    follows = _obj("TenantAccount", "a", {"planRef": {"name": "basic"}})
    assert currency_of(follows, PLANS, BOOKS) == "EUR"  # pb-usd -> its successor in force, not the announced one
    pinned = _obj("TenantAccount", "b", {"planRef": {"name": "basic"}, "priceBookPin": "pb-jpy"})
    assert currency_of(pinned, PLANS, BOOKS) == "JPY"
    assert currency_of(_obj("TenantAccount", "c", {"planRef": {"name": "none"}}), PLANS, BOOKS) is None
    elsewhere = {**follows, "metadata": {"name": "a", "namespace": "other"}}
    assert currency_of(elsewhere, PLANS, BOOKS) is None  # books and plans are the tenant's namespace's only
    loop = [_obj("PriceBook", "x", {"currency": "USD", "supersedes": "y"}, {"state": "Active"}),
            _obj("PriceBook", "y", {"currency": "CHF", "supersedes": "x"}, {"state": "Active"})]
    assert currency_of(_obj("TenantAccount", "d", {"priceBookPin": ""} | {"planRef": {"name": "p"}}),
                       [_obj("Plan", "p", {"priceBookRef": "x"})], loop) in ("USD", "CHF")  # ends, whatever


def test_tenant_rows() -> None:
    spec = {"displayName": "A", "billingMode": "Prepaid", "planRef": {"name": "basic"}}
    tenant = _obj("TenantAccount", "ten-a", spec,
                  {"state": "Suspended", "balance": "-0.25", "runwayDays": "3.500", "mtdSpend": "12.5",
                   "allowanceTokens": "100000", "consecutivePaymentFailures": 2, "conditions": [
                       {"type": "BalanceStale", "status": "True", "reason": "LedgerUnavailable", "message": "down"},
                       {"type": "UsagePriced", "status": "False", "reason": "UnpricedUsage", "message": "no SKU x"},
                       {"type": "ReconcileDrift", "status": "False", "reason": "InSync"}]},
                  annotations={views.SUSPENDED_ANNOTATION: "INC-1", views.SUSPENDED_BY_ANNOTATION: "ops at T"})
    (row,) = views.tenant_rows([tenant], views.tenant_currencies([tenant], PLANS, BOOKS))
    assert row.key == f"{NS}/ten-a"
    assert {k: row.cells[k] for k in ("balance", "runway", "mtd", "allowance", "failures", "suspended")} == {
        "balance": "-0.25 EUR", "runway": "3.5 days", "mtd": "12.50 EUR", "allowance": "100,000", "failures": "2",
        "suspended": "INC-1"}
    assert row.problems == ("BalanceStale: LedgerUnavailable: down", "UsagePriced: UnpricedUsage: no SKU x")
    health = views.health([row])
    assert health.stale == [row] and health.unpriced == [row] and health.drift == []
    assert views.condition_text(row, "UsagePriced") == "UnpricedUsage: no SKU x"


def test_budget_rows_mark_the_fired_thresholds_per_cap() -> None:
    budget = _obj("BudgetPolicy", "b", {"tenantRef": {"name": "ten-a"}, "selector": {"keyLabels": {"team": "rag"}},
                                        "caps": [{"amount": "100", "period": "Daily", "thresholds": [
                                            {"pct": 80, "action": "Notify"}, {"pct": 100, "action": "Freeze"}]},
                                            {"amount": "1000", "period": "Monthly", "thresholds": [
                                                {"pct": 80, "action": "Notify"}]}]},
                  {"currentSpend": "85.000000", "firedThresholds": [{"capIndex": 0, "pct": 80, "firedAt": "T"}],
                   "conditions": [{"type": "ThresholdFired", "status": "True", "reason": "Notified"}]})
    (row,) = views.budget_rows([budget], {f"{NS}/ten-a": "USD"})
    assert row.cells["spend"] == "85.00 USD" and row.cells["enforced"] == "Notified"
    assert row.cells["selector"] == "team=rag"
    caps = row.extra["caps"]
    assert [(c["amount"], c["period"]) for c in caps] == [("100.00 USD", "Daily"), ("1,000.00 USD", "Monthly")]
    assert [t["fired"] for t in caps[0]["thresholds"]] == ["T", ""]
    assert caps[1]["thresholds"][0]["fired"] == ""  # the same pct of another cap has not fired


def test_reservation_and_connector_rows() -> None:
    rsv = _obj("Reservation", "r", {"tenantRef": "ten-a", "sku": "h200", "count": 4, "geo": "us-east",
                                    "class": "Guaranteed", "monthlyPrice": "12000.000000",
                                    "window": {"start": "S", "end": "E"}},
               {"state": "Confirmed", "capacityCheck": {"available": True, "pool": "us-east/h200"}})
    (row,) = views.reservation_rows([rsv], {})
    assert row.cells["price"] == "12,000.00 USD"  # no PriceBook known: USD, as the reservation's charge
    assert row.cells["capacity"] == "available in us-east/h200"
    conn = _obj("BillingConnector", "c", {"type": "stripe"},
                {"connected": True, "lastSync": {"at": "T", "pushedRecords": 5, "failed": 0},
                 "webhookStats": {"received24h": 7, "signatureFailures": 1},
                 "conditions": [{"type": "SyncHealthy", "status": "False", "reason": "SyncFailed", "message": "m"}]})
    (row,) = views.connector_rows([conn])
    assert (row.cells["connected"], row.cells["pushed"], row.cells["received"]) == ("yes", "5", "7")
    assert row.problems == ("SyncHealthy: SyncFailed: m",)


METRICS = """# HELP maasctl_billing_rater_records_behind x
# TYPE maasctl_billing_rater_records_behind gauge
maasctl_billing_rater_records_behind 12.0
maasctl_billing_rater_oldest_unrated_seconds 3.7
maasctl_billing_rater_seconds_since_progress 1.2
maasctl_billing_rated_records_total{result="charged"} 40.0
maasctl_billing_unpriced_records_total{namespace="tenants",tenant="ten-a"} 3.0
leader_election_master_status{name="billing-controller"} LEADER
"""


def test_rater_figures_from_the_leader_only() -> None:
    leader = views.rater_figures(views.parse_metrics(METRICS.replace("LEADER", "1.0")))
    assert leader.leader and leader.rating
    assert (leader.records_behind, leader.oldest_unrated_seconds, leader.seconds_since_progress) == ("12", "4", "1")
    assert leader.rated == {"charged": "40"} and leader.unpriced == {"tenants/ten-a": "3"}
    assert not views.rater_figures(views.parse_metrics(METRICS.replace("LEADER", "0.0"))).leader
    alone = views.rater_figures(views.parse_metrics(METRICS.split("leader_election")[0]))
    assert alone.leader  # without leader election the one replica rates
    assert not views.rater_figures(views.parse_metrics("process_cpu_seconds_total 1\n")).rating


def test_console_flags() -> None:
    args = build_parser().parse_args([
        "console", "--billing-admin-group=billing-admins", "--billing-operator-group=ops",
        "--billing-operator-group=sre", "--billing-viewer-group=finance", "--tenant-portal",
        "--billing-metrics-url=http://billing:8080/metrics"])
    billing = settings_from_args(args).billing
    assert billing.role(["finance", "sre"]) == "operator" and billing.role(["billing-admins"]) == "admin"
    assert billing.role(["developers"]) is None
    assert billing.metrics_url == "http://billing:8080/metrics" and billing.tenant_portal
    plain = settings_from_args(build_parser().parse_args(["console"])).billing
    assert plain.role(["maas-admins"]) is None and not plain.tenant_portal  # no billing role without the flags


def test_no_float_in_the_billing_pages() -> None:
    package = Path(maasctl.console.billing.__file__).parent
    offenders = [f"{p.name}:{line}: {what}" for p in sorted(package.rglob("*.py"))
                 for line, what in float_uses(ast.parse(p.read_text(), str(p)))]
    assert offenders == []


def test_maasctl_dev_makes_its_administrator_a_billing_admin() -> None:
    from maasctl.dev import billing_console_args

    args = billing_console_args("0")
    assert args == ("--billing-admin-group=maas-admins",)  # no billing probe: no metrics URL
    assert billing_console_args("127.0.0.1:8096")[-1] == "--billing-metrics-url=http://127.0.0.1:8096/metrics"
    assert billing_console_args(":8096")[-1] == "--billing-metrics-url=http://127.0.0.1:8096/metrics"
    billing = settings_from_args(build_parser().parse_args(["console", *args])).billing
    assert billing.role(["maas-admins"]) == "admin"
    portal = settings_from_args(build_parser().parse_args(
        ["console", *billing_console_args("0", "http://127.0.0.1:9")])).billing
    assert portal.tenant_portal and portal.api_url == "http://127.0.0.1:9"  # alice's wallet at /portal
