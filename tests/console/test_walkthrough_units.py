"""The billing walkthrough's judgement of each step (console/billing/walkthrough.py) and the guided forms'
prefilled values, pure; the browser journey is in test_billing_guide.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from maasctl.console.billing import authoring, walkthrough

NS = "maas-gateway"
SUB_NS = "models-as-a-service"


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None, *, ns: str = NS,
        created: str = "2026-12-01T00:00:00Z", **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": ns, "creationTimestamp": created, **meta},
            "spec": spec, "status": status or {}}


BOOK = obj("PriceBook", "standard", {"currency": "EUR"}, {"state": "Active"})
PLAN = obj("Plan", "basic", {"priceBookRef": "standard", "targetRef": {"kind": "Gateway", "name": "gw"}},
           {"conditions": [{"type": "Compiled", "status": "True", "reason": "Compiled"}]})


def tenant(name: str, balance: Any = None, *, mode: str = "Prepaid", plan: str = "basic", org: str = "acme",
           created: str = "2026-12-02T00:00:00Z") -> dict[str, Any]:
    return obj("TenantAccount", name, {"planRef": {"name": plan}, "billingMode": mode, "displayName": name.title()},
               {"balance": balance} if balance is not None else {}, created=created,
               labels={walkthrough.ORGANIZATION_LABEL: org})


def sub(name: str, org: str, **meta: Any) -> dict[str, Any]:
    return obj("MaaSSubscription", name, {"organization": {"id": org}}, ns=SUB_NS, **meta)


def states(books: list[Any], plans: list[Any], tenants: list[Any], subs: list[Any]) -> dict[str, walkthrough.Step]:
    return {s.key: s for s in walkthrough.steps(walkthrough.chain(books, plans, tenants, subs))}


def test_nothing_yet_starts_at_the_first_pricebook() -> None:
    steps = states([], [], [], [])
    assert [s.done for s in steps.values()] == [False] * 5
    assert steps["pricebook"].href == "/billing/edit/pricebooks/new?guide=1"
    assert steps["plan"].href == ""  # nothing to attach yet: no link that would fail


def test_a_draft_book_says_why_and_links_to_its_dates() -> None:
    draft = obj("PriceBook", "standard", {}, {"state": "Draft", "conditions": [
        {"type": "NoticeValid", "status": "False", "reason": "NoticeTooShort", "message": "less than 30 days"}]})
    step = states([draft], [], [], [])["pricebook"]
    assert not step.done and "Draft" in step.detail and "less than 30 days" in step.detail
    assert step.href == f"/billing/edit/pricebooks/{NS}/standard"
    plan_step = states([draft], [], [], [])["plan"]
    assert plan_step.href == f"/billing/edit/plans/new?guide=1&book={NS}%2Fstandard"


def test_an_uncompiled_plan_is_not_done() -> None:
    plan = obj("Plan", "basic", {"priceBookRef": "standard"}, {"conditions": [
        {"type": "Compiled", "status": "False", "reason": "TargetNotFound", "message": "no Gateway gw"}]})
    step = states([BOOK], [plan], [], [])["plan"]
    assert not step.done and "no Gateway gw" in step.detail


def test_a_prepaid_tenant_needs_money_then_a_subscription_of_its_organization() -> None:
    steps = states([BOOK], [PLAN], [tenant("acme", "0.000000")], [])
    assert steps["tenant"].done and not steps["wallet"].done
    assert steps["wallet"].href == f"/billing/tenants/{NS}/acme#credit"
    assert not steps["subscription"].done and "acme" in steps["subscription"].detail
    others = [sub("other", "other-org"), sub("gone", "acme", deletionTimestamp="2026-12-03T00:00:00Z")]
    steps = states([BOOK], [PLAN], [tenant("acme", "0.000001")], others)
    assert steps["wallet"].done and not steps["subscription"].done
    assert "Balance 0.000001 EUR" in steps["wallet"].detail  # shown as money, in the book's currency
    steps = states([BOOK], [PLAN], [tenant("acme", "12.50")], [*others, sub("acme-sub", "acme")])
    assert all(s.done for s in steps.values())


def test_a_balance_is_read_as_a_decimal_string_only() -> None:
    for balance in (5.0, 5, "-1.00", "abc", "NaN", "", True):
        assert not states([BOOK], [PLAN], [tenant("acme", balance)], [])["wallet"].done, balance


def test_invoiced_and_showback_tenants_need_no_wallet() -> None:
    for mode in ("Invoiced", "ShowbackOnly"):
        assert states([BOOK], [PLAN], [tenant("acme", mode=mode)], [])["wallet"].done


def test_the_chain_follows_the_newest_tenant_whose_plan_exists() -> None:
    newest_without_plan = tenant("zeta", plan="missing", created="2026-12-05T00:00:00Z")
    older = tenant("acme", "1.00", created="2026-12-02T00:00:00Z")
    newer = tenant("beta", "0", org="beta-org", created="2026-12-04T00:00:00Z")
    found = walkthrough.chain([BOOK], [PLAN], [older, newer, newest_without_plan], [])
    assert found.tenant is newer and found.plan is PLAN and found.book is BOOK


def test_guided_forms_are_prefilled_from_the_gateway_and_the_previous_step() -> None:
    models = [obj("MaaSModelRef", "granite", {}, ns="llm"), obj("MaaSModelRef", "gpt-x", {}, ns="llm"),
              obj("MaaSModelRef", "gpt-x", {}, ns="other")]
    book = walkthrough.defaults("pricebooks", f"{NS}/gw", [], [], models, {})
    assert book["namespace"] == NS and book["noticeDays"] == "0" and book["effectiveFrom"] == ""
    assert book["skus"].splitlines() == [f"gpt-x {walkthrough.EXAMPLE_RATES}", f"granite {walkthrough.EXAMPLE_RATES}"]
    assert authoring.parse_skus(book["skus"])[0]["rates"] == {"prompt_tokens": "1.00", "completion_tokens": "2.00"}
    plan = walkthrough.defaults("plans", f"{NS}/gw", [BOOK], [], [], {"book": "other-ns/pb"})
    assert (plan["namespace"], plan["priceBookRef"], plan["targetName"]) == ("other-ns", "pb", "gw")
    assert walkthrough.defaults("plans", f"{NS}/gw", [BOOK], [], [], {})["priceBookRef"] == "standard"
    tenant_form = walkthrough.defaults("tenantaccounts", f"{NS}/gw", [], [PLAN], [], {})
    assert (tenant_form["namespace"], tenant_form["planRef"], tenant_form["billingMode"]) == (NS, "basic", "Prepaid")


def test_an_empty_effective_from_is_the_earliest_the_notice_allows() -> None:
    now = datetime(2026, 12, 6, 10, 0, 0, 750_000, tzinfo=UTC)
    assert authoring.earliest_effective(now, "0") == "2026-12-06T10:00:05Z"
    assert authoring.earliest_effective(now, " 30 ") == "2027-01-05T10:00:05Z"
    for bad in ("", "-1", "1.5", "\uff13", "999999"):  # \uff13: a fullwidth 3
        assert authoring.earliest_effective(now, bad) is None, bad
