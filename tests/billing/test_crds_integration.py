"""The seven billing CRDs on the real local control plane: every seed example is accepted as written, and a
corpus of invalid objects is refused by the API server with a message that says what is wrong."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import dump, parse
from maasctl.billing.api import KINDS

from . import examples
from .conftest import Billing, error_message

pytestmark = pytest.mark.integration
KIND_BY_NAME = {kind.__name__: kind for kind in KINDS}


@pytest.mark.parametrize("name", sorted(examples.ALL))
async def test_seed_example_is_accepted_as_written(name: str, billing: Billing, namespace: str) -> None:
    obj = examples.example(name, namespace)
    try:
        stored = await billing.create(obj)
        assert stored["spec"] == examples.stored_spec(name)
        model = parse(KIND_BY_NAME[obj["kind"]], stored)
        assert dump(model)["spec"] == stored["spec"]
    finally:
        if obj["kind"] == "BillingConsole":
            await billing.delete("BillingConsole", "default")


Mutation = Callable[[dict[str, Any]], None]


def edit(example: str, mutate: Mutation, name: str | None = None) -> Callable[[str], dict[str, Any]]:
    def make(namespace: str) -> dict[str, Any]:
        obj = examples.example(example, namespace)
        mutate(obj["spec"])
        if name is not None:
            obj["metadata"]["name"] = name
        return obj

    return make


def at(path: str, value: Any) -> Mutation:
    """Set (or with `...` delete) a dotted path; digits index lists."""

    def mutate(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is ...:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = copy.deepcopy(value)

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        for m in mutations:
            m(spec)

    return mutate


PB, PLAN, TEN, CONN, BUD, CON, RSV = ("pricebook", "plan", "tenant-prepaid", "connector", "budget", "console",
                                      "reservation-guaranteed")
AMOUNT = "must be an amount written as a decimal string"
UNSUPPORTED = "Unsupported value"
AT_LEAST_0 = "should be greater than or equal to 0"
AT_LEAST_1 = "should be greater than or equal to 1"
GLOB = "modelScopes entries are globs of model names"
ONE_SKU = {"sku": "gpt-4o", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1"}}

INVALID: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    # PriceBook
    ("pb-currency", edit(PB, at("currency", "BTC")), UNSUPPORTED),
    ("pb-notice-negative", edit(PB, at("noticeDays", -1)), AT_LEAST_0),
    ("pb-no-skus", edit(PB, at("skus", [])), "should have at least 1 items"),
    ("pb-rate-two-dots", edit(PB, at("skus.0.rates.prompt_tokens", "2.5.0")), f"rates values {AMOUNT}"),
    ("pb-rate-negative", edit(PB, at("skus.0.rates.prompt_tokens", "-1")), f"rates values {AMOUNT}"),
    ("pb-rate-exponent", edit(PB, at("skus.0.rates.prompt_tokens", "1e3")), f"rates values {AMOUNT}"),
    ("pb-rate-7-decimals", edit(PB, at("skus.0.rates.prompt_tokens", "0.1234567")), f"rates values {AMOUNT}"),
    ("pb-rate-float", edit(PB, at("skus.0.rates.prompt_tokens", 2.5)), 'Invalid value: "number"'),
    ("pb-rates-empty", edit(PB, at("skus.0.rates", {})), "should have at least 1 properties"),
    ("pb-rates-key", edit(PB, at("skus.0.rates", {"Prompt Tokens": "1"})), "rates keys are usage dimensions"),
    ("pb-duplicate-sku", edit(PB, at("skus", [ONE_SKU, ONE_SKU])), "Duplicate value"),
    ("pb-effective-not-a-time", edit(PB, at("effectiveFrom", "next monday")), "effectiveFrom"),
    ("pb-fault-policy", edit(PB, at("providerFaultPolicy", "charge_all")), UNSUPPORTED),
    ("pb-disconnect-policy", edit(PB, at("clientDisconnectPolicy", "bill_all")), UNSUPPORTED),
    ("pb-discount-over-100", edit(PB, at("volumeTiers.0.discountPct", "101")), "percentage from 0 to 100"),
    ("pb-threshold-negative", edit(PB, at("volumeTiers.0.thresholdTokens", -5)), AT_LEAST_0),
    ("pb-committed-tps-zero", edit(PB, at("committedUse", [{"name": "starter", "tokensPerSecond": 0,
                                                             "monthlyPrice": "100"}])), AT_LEAST_1),
    ("pb-committed-price", edit(PB, at("committedUse", [{"name": "starter", "tokensPerSecond": 10,
                                                         "monthlyPrice": "12,000"}])), f"monthlyPrice {AMOUNT}"),
    ("pb-markup", edit(PB, at("skus.0.passThrough", {"provider": "openai", "markupPct": "15%",
                                                      "costSecretRef": {"name": "c"}})), f"markupPct {AMOUNT}"),
    ("pb-supersedes-itself", edit(PB, at("supersedes", "pb-standard")), "cannot supersede itself"),
    ("pb-geo", edit(PB, at("skus.0.geo", "US East")), "geo must be empty"),
    ("pb-no-currency", edit(PB, at("currency", ...)), "Required value"),
    # Plan
    ("plan-target-kind", edit(PLAN, at("targetRef.kind", "Service")), "targetRef.kind must be Gateway or HTTPRoute"),
    ("plan-target-group", edit(PLAN, at("targetRef.group", "apps")),
     "targetRef.group must be gateway.networking.k8s.io"),
    ("plan-rpm-negative", edit(PLAN, at("limits.requestsPerMinute", -1)), AT_LEAST_0),
    ("plan-tpd-negative", edit(PLAN, at("limits.tokensPerDay", -1)), AT_LEAST_0),
    ("plan-concurrency-negative", edit(PLAN, at("limits.maxConcurrency", -1)), AT_LEAST_0),
    ("plan-gpu-negative", edit(PLAN, at("limits.gpuQuota", -1)), AT_LEAST_0),
    ("plan-model-glob-space", edit(PLAN, at("modelScopes", ["Llama 3"])), GLOB),
    ("plan-model-glob-quote", edit(PLAN, at("modelScopes", ["llama'3"])), GLOB),
    ("plan-geo-scope", edit(PLAN, at("geoScopes", ["US"])), "geoScopes entries are *"),
    ("plan-geo-empty", edit(PLAN, at("geoScopes", [])), "should have at least 1 items"),
    ("plan-no-target", edit(PLAN, at("targetRef", ...)), "Required value"),
    # TenantAccount
    ("tenant-mode", edit(TEN, at("billingMode", "Postpaid")), UNSUPPORTED),
    ("tenant-reload-threshold", edit(TEN, at("reloadPolicy.thresholdAmount", "5k")),
     f"reloadPolicy.thresholdAmount {AMOUNT}"),
    ("tenant-reloads-per-day", edit(TEN, at("reloadPolicy.maxReloadsPerDay", -1)), AT_LEAST_0),
    ("tenant-grace-negative", edit(TEN, at("gracePolicy.graceAmount", "-50")), f"gracePolicy.graceAmount {AMOUNT}"),
    ("tenant-freeze-mode", edit(TEN, at("gpuFreezeMode", "Kill")), UNSUPPORTED),
    ("tenant-display-name", edit(TEN, at("displayName", "")), "should be at least 1 chars long"),
    ("tenant-plan-ref", edit(TEN, at("planRef.name", "Bad_Name")), "should match"),
    # BillingConnector
    ("connector-type", edit(CONN, at("type", "paypal")), UNSUPPORTED),
    ("connector-interval", edit(CONN, at("sync", {"usageRecordsInterval": "5 minutes"})), "should match"),
    ("connector-tax", edit(CONN, at("taxMode", "vat")), UNSUPPORTED),
    # BudgetPolicy
    ("budget-pct-zero", edit(BUD, at("caps.0.thresholds.0.pct", 0)), AT_LEAST_1),
    ("budget-pct-over-100", edit(BUD, at("caps.0.thresholds.0.pct", 101)), "should be less than or equal to 100"),
    ("budget-action", edit(BUD, at("caps.0.thresholds.0.action", "Alert")), UNSUPPORTED),
    ("budget-period", edit(BUD, at("caps.0.period", "Yearly")), UNSUPPORTED),
    ("budget-no-caps", edit(BUD, at("caps", [])), "should have at least 1 items"),
    ("budget-no-thresholds", edit(BUD, at("caps.0.thresholds", [])), "should have at least 1 items"),
    ("budget-amount", edit(BUD, at("caps.0.amount", "30k")), f"caps.amount {AMOUNT}"),
    ("budget-duplicate-pct", edit(BUD, at("caps.0.thresholds", [{"pct": 80, "action": "Notify"},
                                                                 {"pct": 80, "action": "Freeze"}])), "Duplicate value"),
    # BillingConsole
    ("console-name", edit(CON, lambda s: None, name="console"), "singleton: its name must be default"),
    ("console-replicas", edit(CON, at("replicas", -1)), AT_LEAST_0),
    ("console-oidc-missing", edit(CON, at("auth", {"mode": "OIDC"})), "auth.mode OIDC needs auth.oidc"),
    ("console-auth-mode", edit(CON, at("auth", {"mode": "LDAP"})), UNSUPPORTED),
    # Reservation
    ("reservation-end-before-start", edit(RSV, at("window.end", "2026-08-01T00:00:00Z")),
     "window.end must be after window.start"),
    ("reservation-empty-window", edit(RSV, at("window.end", "2026-09-01T00:00:00Z")),
     "window.end must be after window.start"),
    ("reservation-count-zero", edit(RSV, at("count", 0)), AT_LEAST_1),
    ("reservation-sku-empty", edit(RSV, at("sku", "")), "should be at least 1 chars long"),
    ("reservation-class", edit(RSV, at("class", "Spot")), UNSUPPORTED),
    ("reservation-price", edit(RSV, at("monthlyPrice", "12000.0000001")), f"monthlyPrice {AMOUNT}"),
]


def test_the_invalid_corpus_is_large_and_covers_every_kind() -> None:
    assert len(INVALID) >= 40
    kinds = {make("ns")["kind"] for _, make, _ in INVALID}
    assert kinds == {kind.__name__ for kind in KINDS}


@pytest.mark.parametrize(("case", "make", "expected"), INVALID, ids=[c[0] for c in INVALID])
async def test_invalid_object_is_refused_with_a_readable_message(
    case: str, make: Callable[[str], dict[str, Any]], expected: str, billing: Billing, namespace: str
) -> None:
    obj = make(namespace)
    with pytest.raises(k8s.ApiException) as err:
        await billing.create(obj, dry_run="All")
    assert err.value.status == 422, error_message(err.value)
    assert expected in error_message(err.value)


async def test_the_spec_of_an_active_pricebook_is_frozen(billing: Billing, namespace: str) -> None:
    await billing.create(examples.example("pricebook", namespace))
    rates = {"spec": {"skus": [{"sku": "llama-3-70b", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "3.00"}}]}}
    await billing.patch("PriceBook", "pb-standard", namespace, rates)  # still Draft: editable
    await billing.patch("PriceBook", "pb-standard", namespace, {"status": {"state": "Active"}}, status=True)
    with pytest.raises(k8s.ApiException) as err:
        await billing.patch("PriceBook", "pb-standard", namespace, {"spec": {"noticeDays": 31}})
    assert "publish a new PriceBook that supersedes it" in error_message(err.value)
    stored = await billing.get("PriceBook", "pb-standard", namespace)
    assert stored is not None and stored["spec"]["skus"][0]["rates"] == {"prompt_tokens": "3.00"}
    # Labels and status may still change.
    await billing.patch("PriceBook", "pb-standard", namespace, {"metadata": {"labels": {"team": "finance"}}})
    await billing.patch("PriceBook", "pb-standard", namespace, {"status": {"activeTenants": 2}}, status=True)


async def test_a_tenants_allowance_caps_are_refused_unless_each_epoch_has_one_integer_cap(
        billing: Billing, namespace: str) -> None:
    """What the Plan compiler reads as a TokenRateLimitPolicy limit is held to its form at admission (the
    compiler fails closed on it anyway: tests/billing/test_wallet_enforcement.py)."""
    tenant = examples.example("tenant-prepaid", namespace)
    await billing.create(tenant)
    name = tenant["metadata"]["name"]
    written = [{"epoch": "2026-12-02", "tokens": 50}, {"epoch": "2026-12-01", "tokens": 70}]
    await billing.patch("TenantAccount", name, namespace, {"status": {"allowanceLimits": written}}, status=True)
    today = written[0]
    refused = [
        ([today, {**today, "tokens": 5000}], "allowanceLimits names each epoch once"),
        ([{**today, "tokens": 5000}, today], "allowanceLimits names each epoch once"),
        ([{**today, "epoch": "2026-12-2"}], "should match"),
        ([{**today, "epoch": "today"}], "should match"),
        ([{**today, "tokens": -1}], AT_LEAST_0),
        ([{**today, "tokens": "5000"}], 'Invalid value: "string"'),
        ([{**today, "tokens": 1.5}], "must be of type integer"),
        ([{"epoch": "2026-12-02"}], "Required value"),
        ([*written, {"epoch": "2026-12-03", "tokens": 1}], "must have at most 2 items"),
    ]
    wrong = []
    for caps, expected in refused:
        try:
            await billing.patch("TenantAccount", name, namespace, {"status": {"allowanceLimits": caps}}, status=True)
            wrong.append((caps, "admitted"))
        except k8s.ApiException as exc:
            if exc.status != 422 or expected not in error_message(exc):
                wrong.append((caps, error_message(exc)))
    assert not wrong
    stored = await billing.get("TenantAccount", name, namespace)
    assert stored is not None and stored["status"]["allowanceLimits"] == written
