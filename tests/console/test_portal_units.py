"""The tenant portal's pure parts: who belongs to which tenant (`contract.billing_portal`), money moved to integer
micro-units for charts and back, the portal's cells from the API's JSON, money charts, the console flag and the
BillingConsole's rendering of it, a credit's body as the portal API reads it, and the tenant page's credit form."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from maasctl.billing.controller.portal_credits import CreditError, CreditRequest, parse_credit
from maasctl.cli import build_parser
from maasctl.console.billing import portal_views
from maasctl.console.billing.money import from_micros, micros
from maasctl.console.charts import bar_chart
from maasctl.console.cli import settings_from_args
from maasctl.contract.billing_portal import member_organizations, spend_days, tenants_of

SUB_NS = "models-as-a-service"


def _sub(org: Any, users: Any = None, groups: Any = None, ns: str = SUB_NS, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"owner": {"users": users or [], "groups": [{"name": g} for g in groups or ()]}}
    if org is not None:
        spec["organization"] = {"id": org}
    spec.update(extra.pop("spec", {}))
    return {"metadata": {"name": "s", "namespace": ns, **extra}, "spec": spec}


@pytest.mark.parametrize(("subs", "orgs"), [
    ([_sub("acme", users=["nora"])], {"acme"}),
    ([_sub("acme", groups=["north-team"])], {"acme"}),
    ([_sub("acme", groups=["other"]), _sub("globex", users=["nora"])], {"globex"}),
    ([_sub("acme", users=["*"])], set()),  # open to everyone: nobody's organization
    ([_sub("acme", groups=["system:authenticated"])], set()),
    ([_sub("acme", groups=["system:serviceaccounts"])], set()),
    ([_sub("acme", users=["nora"], ns="nora-playground")], set()),  # not the subscription namespace
    ([_sub("acme", users=["nora"], deletionTimestamp="2026-01-01T00:00:00Z")], set()),
    ([_sub(None, users=["nora"], spec={"tokenMetadata": {"organizationId": "acme"}})], set()),  # changeable
    ([_sub("", users=["nora"])], set()),
    ([_sub("acme", users=["Nora"])], set()),  # exact match
], ids=["user", "group", "only-mine", "star", "authenticated", "serviceaccounts", "other-namespace", "deleting",
        "token-metadata", "empty-org", "case"])
def test_who_belongs_to_an_organization(subs: list[dict[str, Any]], orgs: set[str]) -> None:
    assert member_organizations("nora", ["north-team", "system:authenticated"], subs, SUB_NS) == frozenset(orgs)


def test_nobody_without_a_name_belongs() -> None:
    assert member_organizations("", ["north-team"], [_sub("acme", groups=["north-team"])], SUB_NS) == frozenset()


def test_tenants_answer_to_their_organization_label_else_their_name() -> None:
    tenants = [{"metadata": {"namespace": "b", "name": "ten-acme", "labels": {
        "billing.opendatahub.io/organization-id": "acme"}}},
        {"metadata": {"namespace": "a", "name": "acme"}},
        {"metadata": {"namespace": "a", "name": "globex"}}]
    assert tenants_of(frozenset({"acme"}), tenants) == [("a", "acme"), ("b", "ten-acme")]
    assert tenants_of(frozenset(), tenants) == []


@pytest.mark.parametrize(("text", "days"), [
    ("7", 7), ("30", 30), ("90", 90), (None, None), ("", None), ("31", None), ("030", None), ("+7", None),
    ("-7", None), ("7.0", None), (" 7", None), ("\uff13\uff10", None), ("9" * 5000, None)])
def test_the_spend_range_is_one_of_three_as_written(text: str | None, days: int | None) -> None:
    assert spend_days(text) == days


@pytest.mark.parametrize(("text", "n"), [("1", 1_000_000), ("-1.5", -1_500_000), ("0.000001", 1),
                                         ("123456789012345678901234.123456", 123456789012345678901234123456)],
                         ids=["one", "negative", "micro", "beyond-a-float"])
def test_micros_move_digits(text: str, n: int) -> None:
    assert micros(text) == n
    assert micros(from_micros(n)) == n


@pytest.mark.parametrize("bad", ["1e3", "1.2345678", 1.5, None, "abc", True], ids=str)
def test_micros_refuse_what_is_not_a_decimal_string(bad: Any) -> None:
    assert micros(bad) is None


TENANT: dict[str, Any] = {
    "displayName": "North Labs", "currency": "EUR", "state": "Active", "billingMode": "Prepaid", "plan": "basic",
    "balance": "19.25", "runwayDays": "3.5", "mtdSpend": "6.25", "allowanceTokens": "7700000",
    "reloadPolicy": {"enabled": True, "thresholdAmount": "5", "reloadAmount": "20", "monthlyCapAmount": "100",
                     "maxReloadsPerDay": 2},
    "paymentMethod": {"configured": True, "status": "False", "reason": "CardDeclined", "message": "expired"},
    "budgets": [{"name": "b", "keyLabels": {"project": "rag"}, "enforced": "Notified", "caps": [
        {"amount": "10.00", "period": "Monthly", "spend": "6.25", "percent": "62", "periodEnd": "x",
         "thresholds": [{"pct": 50, "action": "Notify", "firedAt": "2026-12-01T00:00:00Z"}]},
        {"amount": "1.00", "period": "Daily", "spend": "3.00", "percent": "300", "thresholds": []}]}],
}


def test_the_wallet_as_a_tenant_reads_it() -> None:
    w = portal_views.wallet(TENANT)
    assert w["balance"] == "19.25 EUR" and w["runway"] == "3.5 days" and w["allowance"] == "7,700,000"
    assert w["reload"] == ("on: 20.00 EUR when the balance falls below 5.00 EUR; at most 100.00 EUR a month, "
                           "2 reloads a day")
    assert w["payment"] == "not valid: CardDeclined (expired)"
    assert portal_views.wallet({**TENANT, "paymentMethod": {}})["payment"] == "no payment method on file"


def test_budgets_say_how_close_each_cap_is() -> None:
    (b,) = portal_views.budget_rows(TENANT)
    assert b["scope"] == "project=rag" and b["enforced"] == "Notified"
    assert [(c["spend"], c["amount"], c["percent"], c["meter"]) for c in b["caps"]] == [
        ("6.25 EUR", "10.00 EUR", "62", "62"), ("3.00 EUR", "1.00 EUR", "300", "100")]
    assert b["caps"][0]["thresholds"][0]["fired"]


def test_spend_charts_are_micro_units_written_back_as_money() -> None:
    spend = {"currency": "JPY", "days": [{"date": "2026-12-05", "total": "0", "byModel": {}},
                                         {"date": "2026-12-06", "total": "1500", "byModel": {"m": "1500"}}],
             "byModel": [{"model": "m", "amount": "1500"}], "byLabel": None, "monthToDate": "1500",
             "balances": [{"at": "2026-12-06T00:00:00Z", "balance": "-3"}]}
    view = portal_views.spend_view(spend)
    assert view["daily"].points == [("12-05", 0), ("12-06", 1_500_000_000)]
    assert view["daily"].fmt(1_500_000_000) == "1,500 JPY" and view["total"] == "1,500 JPY"
    assert view["by_label"] is None and view["balances"][0]["balance"] == "-3 JPY"
    svg = bar_chart(view["daily"].points, "Spend", "s", fmt=view["daily"].fmt, unit="")
    assert "1,500 JPY" in svg and "tokens" not in svg
    assert "height=\"-" not in bar_chart(view["balance"].points, "Balance", "b", fmt=view["balance"].fmt)


def test_an_entry_shows_its_rated_line_exactly() -> None:
    entry = {"currency": "USD", "details": {"components": {"prompt_tokens": {
        "quantity": "3", "rate": "2.50", "per": 1000000, "amount": "0.0000075", "source": "rate"}}}}
    (c,) = portal_views.entry_components(entry)
    assert c["amount"] == "0.0000075 USD" and c["rate"] == "2.50 USD" and c["per"] == "1,000,000"


def test_the_console_flag_and_the_deployed_console() -> None:
    from maasctl.billing.api.console import BillingConsoleSpec
    from maasctl.billing.rules.console import ConsoleTarget, console_args

    args = build_parser().parse_args(["console", "--tenant-portal", "--billing-api-url", "http://b:8082"])
    billing = settings_from_args(args).billing
    assert billing.tenant_portal and billing.api_url == "http://b:8082"
    target = ConsoleTarget(namespace="ns", gateway_namespace="g", gateway_name="gw", api_url="http://b:8082")
    assert "--billing-api-url=http://b:8082" in console_args(BillingConsoleSpec(), None, target)


def _page(template: str, **context: Any) -> str:
    from maasctl.console.app import templates

    base = {"identity": None, "nav": [], "billing_nav": None, "csrf_token": "t", "flashes": [], "path": "/portal",
            "oidc_enabled": False, "title": "t"}
    return str(templates().env.get_template(template).render(**base, **context))


def test_the_portal_pages_render_the_api_answers() -> None:
    entry = {"id": 3, "key": "usage:r1", "kind": "usage", "currency": "EUR", "amount": "-1.250000",
             "occurredAt": "2026-12-06T10:00:00Z", "recordedAt": "2026-12-06T10:00:01Z", "actor": "rater",
             "reason": "", "tokens": 500000, "model": "llm/gpt-x", "sku": "llm/gpt-x", "priceBook": "pb-eur",
             "details": {"generation": 1, "unit": "per-1M-tokens", "termination": "complete", "components": {
                 "prompt_tokens": {"quantity": "500000", "rate": "2.50", "per": 1000000, "amount": "1.25"}}}}
    (row,) = portal_views.entry_rows([entry])
    html = _page("portal/entry.html", t=TENANT, e=entry, row=row, components=portal_views.entry_components(entry),
                 base="/portal/ns/ten", errors=[])
    assert "-1.25 EUR" in html and "PriceBook pb-eur (generation 1)" in html
    html = _page("portal/ledger.html", t=TENANT, rows=[row], next="2", kind="", kinds=("usage",),
                 base="/portal/ns/ten")
    assert "before=2" in html
    spend = portal_views.spend_view({"currency": "EUR", "days": [{"date": "2026-12-06", "total": "1.25",
                                                                  "byModel": {"llm/gpt-x": "1.25"}}],
                                     "byModel": [{"model": "llm/gpt-x", "amount": "1.25"}],
                                     "byLabel": [{"label": "", "amount": "1.25"}], "monthToDate": "1.25",
                                     "balances": [{"at": "2026-12-06T10:00:00Z", "balance": "19.25"}]})
    html = _page("portal/tenant.html", t={**TENANT, "access": "reader", "organization": "acme"},
                 w=portal_views.wallet(TENANT), budgets=portal_views.budget_rows(TENANT),
                 reservations=portal_views.reservation_rows({"reservations": [{"name": "r", "count": 2}]}),
                 spend=spend, recent=[row], days=30, ranges=(7, 30, 90), base="/portal/ns/ten", errors=[],
                 invoices=portal_views.invoice_rows([{"key": "k1", "invoiceId": "in_1", "status": "finalized",
                                                      "at": "2026-12-01T00:00:00Z", "amount": "6.25",
                                                      "currency": "EUR"}]),
                 no_invoices=portal_views.no_invoices("Prepaid"))
    assert "(keys without labels)" in html and "portal-reader" in html and "(project=rag)" in html
    assert 'style="width: 62%"' in html
    assert 'data-invoice="k1"' in html and "in_1" in html and "/portal/ns/ten/invoices/k1" in html


def test_a_pricebook_form_becomes_exactly_its_fields() -> None:
    from maasctl.console.billing import authoring

    form = authoring.FORMS["pricebooks"]
    values = {"namespace": "tenants", "name": "pb-2", "currency": "EUR", "effectiveFrom": "2027-01-01T00:00:00Z",
              "noticeDays": "30", "supersedes": "pb-1", "providerFaultPolicy": "", "clientDisconnectPolicy": "",
              "skus": "llm/gpt-x per-1M-tokens prompt_tokens=2.50 completion_tokens=10.00\n"
                      "h200 per-gpu-second geo=us-east gpu_seconds=0.001250\n"}
    old = {"spec": {"skus": [{"sku": "llm/gpt-x", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1"},
                              "passThrough": {"provider": "openai", "markupPct": "10",
                                              "costSecretRef": {"name": "c"}}}]}}
    obj = authoring.build(form, values, old)
    assert obj["metadata"] == {"namespace": "tenants", "name": "pb-2"}
    assert obj["spec"] == {
        "currency": "EUR", "effectiveFrom": "2027-01-01T00:00:00Z", "noticeDays": 30, "supersedes": "pb-1",
        "skus": [{"sku": "llm/gpt-x", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50",
                                                                          "completion_tokens": "10.00"},
                  "passThrough": old["spec"]["skus"][0]["passThrough"]},  # not shown, kept
                 {"sku": "h200", "unit": "per-gpu-second", "geo": "us-east", "rates": {"gpu_seconds": "0.001250"}}]}
    assert authoring.values_of(form, obj)["skus"].splitlines()[1] == "h200 per-gpu-second geo=us-east " \
                                                                     "gpu_seconds=0.001250"


@pytest.mark.parametrize(("field", "value", "error"), [
    ("noticeDays", "thirty", "A whole number."), ("noticeDays", "-1", "A whole number."),
    ("currency", "BTC", "One of USD"), ("skus", "llm/gpt-x per-1M-tokens", "line 1"),
    ("skus", "llm/gpt-x per-1M-tokens 2.50", "not DIMENSION=RATE"), ("name", "", "Required."),
], ids=["words", "negative", "currency", "no-rate", "bare-rate", "no-name"])
def test_what_the_form_itself_cannot_read_is_said_next_to_the_field(field: str, value: str, error: str) -> None:
    from maasctl.console.billing import authoring

    values = {"namespace": "t", "name": "pb", "currency": "USD", "effectiveFrom": "x", "noticeDays": "1",
              "skus": "a per-token prompt_tokens=1", field: value}
    with pytest.raises(authoring.FormError) as caught:
        authoring.build(authoring.FORMS["pricebooks"], values)
    assert error in caught.value.errors[field]


def test_tenant_and_plan_forms() -> None:
    from maasctl.console.billing import authoring

    tenant = authoring.build(authoring.FORMS["tenantaccounts"], {
        "namespace": "t", "name": "ten-a", "displayName": "A", "organization": "acme", "planRef": "basic",
        "billingMode": "Prepaid", "reloadEnabled": "", "graceAmount": "1.50"})
    assert tenant["metadata"]["labels"] == {"billing.opendatahub.io/organization-id": "acme"}
    assert tenant["spec"] == {"displayName": "A", "planRef": {"name": "basic"}, "billingMode": "Prepaid",
                              "gracePolicy": {"graceAmount": "1.50"}}  # an unticked reload alone: none
    plan = authoring.build(authoring.FORMS["plans"], {
        "namespace": "t", "name": "basic", "targetKind": "Gateway", "targetName": "gw", "tokensPerMinute": "1000",
        "modelScopes": "llm/*, granite-*"})
    assert plan["spec"] == {"targetRef": {"kind": "Gateway", "name": "gw", "group": "gateway.networking.k8s.io"},
                            "limits": {"tokensPerMinute": 1000}, "modelScopes": ["llm/*", "granite-*"]}


def test_a_budget_form_becomes_its_caps_and_key_labels() -> None:
    from maasctl.console.billing import authoring

    form = authoring.FORMS["budgetpolicies"]
    values = {"namespace": "t", "name": "b", "tenant": "ten-a", "keyLabels": "team=rag, env = prod",
              "caps": "100.00 Monthly 50:Notify 80%:Throttle 100:Freeze\n\n5 Daily 100:Freeze\n"}
    obj = authoring.build(form, values)
    assert obj["spec"] == {"tenantRef": {"name": "ten-a"}, "selector": {"keyLabels": {"team": "rag", "env": "prod"}},
                           "caps": [{"amount": "100.00", "period": "Monthly", "thresholds": [
                               {"pct": 50, "action": "Notify"}, {"pct": 80, "action": "Throttle"},
                               {"pct": 100, "action": "Freeze"}]},
                               {"amount": "5", "period": "Daily", "thresholds": [{"pct": 100, "action": "Freeze"}]}]}
    again = authoring.values_of(form, obj)
    assert again["caps"] == "100.00 Monthly 50:Notify 80:Throttle 100:Freeze\n5 Daily 100:Freeze"
    assert authoring.build(form, again) == obj
    assert "selector" not in authoring.build(form, {**values, "keyLabels": " , "})["spec"]  # every key


@pytest.mark.parametrize(("field", "value", "error"), [
    ("caps", "", "Required."), ("caps", "\n \n", "Required."), ("caps", "10 Monthly", "line 1"),
    ("caps", "10 Monthly 50", "not PCT:ACTION"), ("caps", "10 Monthly 50:Notify\n10 Weekly Notify:50", "line 2"),
    ("caps", "10 Monthly 1000:Notify", "not PCT:ACTION"), ("keyLabels", "team", "not KEY=VALUE"),
    ("keyLabels", "=rag", "not KEY=VALUE"), ("tenant", "", "Required."),
], ids=["empty", "blank-lines", "no-threshold", "bare-pct", "second-line", "four-digits", "no-value", "no-key",
        "no-tenant"])
def test_what_the_budget_form_cannot_read_is_said_next_to_the_field(field: str, value: str, error: str) -> None:
    from maasctl.console.billing import authoring

    values = {"namespace": "t", "name": "b", "tenant": "ten-a", "caps": "1 Daily 100:Freeze", field: value}
    with pytest.raises(authoring.FormError) as caught:
        authoring.build(authoring.FORMS["budgetpolicies"], values)
    assert error in caught.value.errors[field]


def test_the_authoring_pages_render() -> None:
    from maasctl.console.billing import authoring

    for plural, form in authoring.FORMS.items():
        for guide in (False, True):
            html = _page("billing/edit.html", form=form, values={f.name: "" for f in form.fields},
                         errors={"name": "taken", "_form": "no"}, mode="new", plural=plural,
                         now="2026-12-06T00:00:00Z", locked=False, state=None, billing_role="admin", can_write=True,
                         supersede={"old": "pb", "moving": ["a"], "staying": [], "notice": 3}, guide=guide)
            assert 'id="name-error"' in html and 'id="form-error"' in html
            # A guided form returns to Get started (the hidden field) and says what the step is for.
            assert ('name="guide" value="1"' in html) is guide
            assert ('id="guide-help"' in html) is (guide and form.kind in ("PriceBook", "Plan", "TenantAccount"))


def test_the_walkthrough_page_renders_each_state() -> None:
    from maasctl.console.billing import walkthrough

    book = {"metadata": {"namespace": "gw", "name": "standard"}, "spec": {}, "status": {"state": "Active"}}
    plan = {"metadata": {"namespace": "gw", "name": "basic"}, "spec": {"priceBookRef": "standard"},
            "status": {"conditions": [{"type": "Compiled", "status": "True"}]}}
    tenant = {"metadata": {"namespace": "gw", "name": "acme", "labels": {walkthrough.ORGANIZATION_LABEL: "o"}},
              "spec": {"planRef": {"name": "basic"}, "billingMode": "Prepaid"}, "status": {"balance": "1.00"}}
    sub = {"metadata": {"namespace": "s", "name": "acme-sub"}, "spec": {"organization": {"id": "o"}}}
    for objs, ready in (([], [], [], []), False), (([book], [plan], [tenant], [sub]), True):
        found = walkthrough.chain(*objs)
        html = _page("billing/start.html", steps=walkthrough.steps(found), ready=ready, chain=found, errors=[],
                     gateway_urls=("https://gw.example",), organization="o", billing_role="admin", can_write=True)
        assert ('id="walkthrough-ready"' in html) is ready
        assert html.count("data-step=") == 5
        if ready:
            assert "https://gw.example/" in html and "acme-sub" in html
        else:
            assert 'id="step-pricebook"' in html and "/billing/edit/pricebooks/new?guide=1" in html


def test_the_pricebook_and_plan_lists_render_objects_missing_optional_fields() -> None:
    plans = [{"namespace": "t", "name": "basic", "spec": {"targetRef": {"kind": "Gateway", "name": "gw"}},
              "compiled": ""},
             {"namespace": "t", "name": "pro", "spec": {"targetRef": {"kind": "Gateway", "name": "gw"},
                                                        "limits": {"tokensPerMinute": 5000}, "modelScopes": ["a*"]},
              "compiled": "True Compiled"}]
    html = _page("billing/plans.html", rows=plans, is_billing_admin=True, errors=[], billing_role="viewer",
                 can_write=False)
    assert "every model" in html and "tokensPerMinute 5,000" in html
    books = [{"namespace": "t", "name": "pb", "state": "Draft", "currency": "EUR", "effective": "", "notice": 3,
              "supersedes": None, "tenants": 0, "grandfathered": "", "why": "NoticeTooShort"}]
    html = _page("billing/pricebooks.html", rows=books, is_billing_admin=True, errors=[], locked=frozenset(),
                 billing_role="admin", can_write=True)
    assert "NoticeTooShort" in html and "/billing/edit/pricebooks/t/pb" in html


ID = "AbCd-_0123456789xyzXYZ"


def _credit(**fields: Any) -> bytes:
    return json.dumps({"id": ID, "amount": "25.00", "reason": "welcome credit", **fields}).encode()


def test_a_credit_body_is_read_exactly() -> None:
    assert parse_credit(_credit()) == CreditRequest(ID, Decimal("25.00"), "welcome credit")
    assert parse_credit(_credit(amount="1000000")).amount == Decimal(1000000)  # MAX_CREDIT itself
    assert parse_credit(_credit(amount="0.000001", reason="ünïcode ✓ 😀")).amount == Decimal("0.000001")
    assert parse_credit(_credit(id="a" * 64, reason="r" * 500)).id == "a" * 64


@pytest.mark.parametrize(("body", "field"), [
    # amounts that are not a positive money string as written (a class: each spelling of a trick)
    *((_credit(amount=a), "amount") for a in (
        "0", "0.00", "-1", "+5", "1e3", "1E3", "NaN", "nan", "Infinity", "-Infinity", "1.0000001",
        "\uff11\uff10", "\u0663", " 5", "5 ", "5\n", "\t5", "1,000.00", "0x10", "5.", ".5", "1_000", "",
        "1000000.000001", "1" + "0" * 30, "9" * 5000)),
    *((_credit(amount=a), "amount") for a in (5, 5.0, 10**30, None, True, ["5"], {"v": "5"})),
    # ids: too short, too long, path characters, non-ASCII, a newline, not a string
    *((_credit(id=i), "id") for i in (
        "short", "a" * 65, "a" * 16 + "/..", "../" + "a" * 16, "a" * 15 + "é", "\uff41" * 16, "a" * 16 + "\n",
        "a" * 16 + " ", "", 1234567890123456789)),
    # reasons: empty, blank, more than one line, invisible controls, too long
    *((_credit(reason=r), "reason") for r in (
        "", "   ", "a\nb", "a\rb", "a\u2028b", "a\u2029b", "a\x85b", "a\x00b", "\u202egnp.exe", "a\u200bb",
        "r" * 501, None)),
    # the body: not an object, an unknown or missing field, a key twice, JSON's constants, not UTF-8, too deep
    (b"[]", "body"), (b'"x"', "body"), (b"5", "body"), (b"", "body"), (b"{", "body"), (b"null", "body"),
    (_credit(tenant="ns/other"), "body"), (_credit(currency="USD"), "body"),
    (json.dumps({"id": ID, "amount": "25.00"}).encode(), "reason"),
    (b'{"id": "' + ID.encode() + b'", "amount": "1.00", "amount": "900.00", "reason": "r"}', "amount"),
    (b'{"id": "' + ID.encode() + b'", "amount": NaN, "reason": "r"}', "body"),
    (b'{"id": "' + ID.encode() + b'", "amount": "1.00", "reason": "\xff\xfe"}', "body"),
    (b"[" * 100_000 + b"]" * 100_000, "body"),
])
def test_a_credit_body_is_refused_naming_its_field(body: bytes, field: str) -> None:
    with pytest.raises(CreditError) as caught:
        parse_credit(body)
    assert caught.value.field == field, caught.value.message


def test_the_credit_form_is_an_administrators_with_an_id_per_render() -> None:
    from maasctl.console.billing.views import tenant_rows

    (row,) = tenant_rows([{"metadata": {"namespace": "ns", "name": "ten"}, "spec": {}, "status": {}}],
                         {"ns/ten": "EUR"})
    context = {"row": row, "errors": [], "events": [], "max_reason": 500, "charts": None, "days": 30,
               "ranges": (7, 30, 90), "base": "/billing/tenants/ns/ten", "billing_role": "admin", "can_write": True}
    html = _page("billing/tenant.html", **context, credit_id="x" * 24)
    assert 'id="credit-form"' in html and 'action="/billing/tenants/ns/ten/credit"' in html
    assert 'name="credit_id" value="' + "x" * 24 in html and "In EUR" in html and "ledger adjust" in html
    assert 'id="credit-amount"' in html and 'id="credit-reason"' in html
    assert 'id="credit-form"' not in _page("billing/tenant.html", **context, credit_id=None)
    assert 'id="credit-form"' not in _page("billing/tenant.html", **context)  # a page that draws no id: no form
