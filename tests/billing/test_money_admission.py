"""One rule for money: what the API server admits is exactly what `money.parse` accepts.

The CRDs are generated from `money.MONEY_PATTERN` and `money.MAX_LENGTH`; the API server anchors with RE2, where
`$` is the end of the text, while Python's `$` also matches before a final newline. These tests put the same
corpus of strings through the real API server (dry-run creates and status writes) and through the parser and
require the same verdict, with the digit bound at its edge (24 digits admitted, 25 refused)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import crdgen
from maasctl.billing import money
from maasctl.billing.api import GROUP, VERSION
from maasctl.billing.api import KINDS as BILLING_KINDS

from . import examples
from .conftest import Billing, error_message
from .test_money import NOT_MONEY_TEXT

MONEY_TEXT = ["0", "1", "2.50", "0.000001", "1" * money.MAX_DIGITS, "9" * money.MAX_DIGITS + ".999999",
              "1" * (money.MAX_DIGITS - 1) + ".5", "007"]
CORPUS = MONEY_TEXT + NOT_MONEY_TEXT


def _money_schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every string schema of a CRD whose CEL rule is the money pattern (signed or not)."""
    if isinstance(node, dict):
        rules = [r.get("rule", "") for r in node.get("x-kubernetes-validations") or ()]
        if node.get("type") == "string" and any("[0-9]{1," in r and "matches" in r for r in rules):
            yield node
        for value in node.values():
            yield from _money_schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _money_schemas(value)


def test_every_money_field_of_every_crd_has_the_code_bound() -> None:
    found = 0
    for kind in BILLING_KINDS:
        for schema in _money_schemas(crdgen.crd(kind)):
            found += 1
            (rule,) = (r["rule"] for r in schema["x-kubernetes-validations"])
            if "-?" in rule:
                assert schema["maxLength"] == money.SIGNED_MAX_LENGTH and money.SIGNED_PATTERN.replace("\\", "\\\\") \
                    in rule, schema
            else:
                assert schema["maxLength"] == money.MAX_LENGTH and money.MONEY_PATTERN.replace("\\", "\\\\") in rule, \
                    schema
    assert found >= 15  # rates, markup, monthly prices, reload and grace amounts, balances, spend, caps


# -- on the API server -------------------------------------------------------------------------------------

async def _admitted(billing: Billing, obj: dict[str, Any]) -> tuple[bool, str]:
    try:
        await billing.create(obj, dry_run="All")
    except k8s.ApiException as exc:
        assert exc.status == 422, (exc.status, exc.body)
        return False, error_message(exc)
    return True, ""


def _budget(namespace: str, amount: str) -> dict[str, Any]:
    obj = examples.example("budget", namespace)
    obj["spec"]["caps"][0]["amount"] = amount
    return obj


def _pricebook(namespace: str, rate: str) -> dict[str, Any]:
    obj = examples.example("pricebook", namespace)
    obj["spec"]["skus"][0]["rates"]["prompt_tokens"] = rate
    return obj


def _tenant(namespace: str, grace: str) -> dict[str, Any]:
    obj = examples.example("tenant-prepaid", namespace)
    obj["spec"]["gracePolicy"]["graceAmount"] = grace
    return obj


@pytest.mark.integration
@pytest.mark.parametrize("make", [_budget, _pricebook, _tenant], ids=["caps.amount", "rates", "graceAmount"])
async def test_admission_and_the_parser_agree_on_every_string(make: Any, billing: Billing, namespace: str) -> None:
    disagree = []
    for text in CORPUS:
        admitted, message = await _admitted(billing, make(namespace, text))
        if admitted != money.is_money(text):
            disagree.append((text, admitted, message))
        if not admitted:
            assert "must be an amount written as a decimal string" in message or "Too long" in message \
                or "at most" in message, (text, message)
    assert not disagree
    # The webhook's and the controller's parser refuse what admission refuses, for the same reason.
    for text in NOT_MONEY_TEXT:
        with pytest.raises(money.MoneyError):
            money.parse(text)


@pytest.mark.integration
async def test_a_status_balance_is_signed_money_by_the_same_rule(billing: Billing, namespace: str,
                                                                  kube: k8s.ApiClient) -> None:
    """Status amounts are written by the controller: the API server holds them to the code's (signed) bound."""
    tenant = examples.example("tenant-showback", namespace)
    await billing.create(tenant)
    name = tenant["metadata"]["name"]
    custom = k8s.CustomObjectsApi(kube)
    disagree = []
    for text in [*CORPUS, *("-" + t for t in CORPUS)]:
        try:
            await custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "tenantaccounts", name, {"status": {"balance": text}}, dry_run="All",
                _content_type="application/merge-patch+json")
            admitted = True
        except k8s.ApiException as exc:
            assert exc.status == 422, (exc.status, exc.body)
            admitted = False
        try:
            money.parse_signed(text)
            parsed = True
        except money.MoneyError:
            parsed = False
        if admitted != parsed:
            disagree.append((text, admitted))
    assert not disagree
