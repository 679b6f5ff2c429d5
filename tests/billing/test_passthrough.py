"""The cost Secret's format (rating.cost_data), refused with a reason that names keys and never values, and the
markup rated exactly: cost x (1 + markupPct / 100), per dimension, in the SKU's unit."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from maasctl.billing.api.pricebook import PriceBookSpec
from maasctl.billing.controller.reconcilers.costs import cost_secret_names, decode, unit_mismatches
from maasctl.billing.rules.rating import (
    Book,
    Context,
    CostDataError,
    RatedLine,
    Unpriced,
    Usage,
    cost_data,
    cost_unit,
    rate,
)


def test_cost_data_reads_dimensions_to_decimal_rates() -> None:
    got = cost_data({"prompt_tokens": "2.50", "completion_tokens": "10\n", "requests": "0.000001"})
    assert got == {"prompt_tokens": Decimal("2.50"), "completion_tokens": Decimal("10"),
                   "requests": Decimal("0.000001")}
    assert all(isinstance(v, Decimal) for v in got.values())


@pytest.mark.parametrize(("data", "why"), [
    ({}, "holds no rate"),
    ({"prompt": "1.00"}, "'prompt' are not dimensions"),
    ({"prompt_tokens": "-1.00"}, "key 'prompt_tokens' is not a non-negative decimal"),
    ({"prompt_tokens": "1e3"}, "key 'prompt_tokens'"),
    ({"prompt_tokens": "0.1234567"}, "key 'prompt_tokens'"),
    ({"prompt_tokens": "secret-cost 9.99"}, "key 'prompt_tokens'"),
    ({"prompt_tokens": ""}, "key 'prompt_tokens'"),
    ({"unit": "per-1M-tokens"}, "holds no rate"),
    ({"unit": "per-kilowatt", "prompt_tokens": "1.00"}, "key 'unit' is not a unit rating knows"),
])
def test_malformed_cost_data_is_refused_without_echoing_values(data: dict[str, str], why: str) -> None:
    with pytest.raises(CostDataError) as exc:
        cost_data(data)
    assert why in str(exc.value)
    assert "9.99" not in str(exc.value) and "1e3" not in str(exc.value)


def test_a_secret_value_that_is_not_text_is_malformed() -> None:
    with pytest.raises(CostDataError, match="'prompt_tokens' is not UTF-8"):
        decode({"data": {"prompt_tokens": base64.b64encode(b"\xff\xfe").decode()}})
    assert decode({"data": {"prompt_tokens": base64.b64encode(b"2.50").decode()}}) == {"prompt_tokens": "2.50"}


def test_cost_secret_names_are_those_of_pass_through_skus() -> None:
    book = {"spec": {"skus": [{"sku": "a", "passThrough": {"costSecretRef": {"name": "openai-costs"}}},
                              {"sku": "b"}, {"sku": "c", "passThrough": {"costSecretRef": {"name": "x"}}}]}}
    assert cost_secret_names(book) == {"openai-costs", "x"}
    assert cost_secret_names({"spec": {}}) == set()


SPEC = PriceBookSpec.model_validate({
    "currency": "USD", "effectiveFrom": "2026-01-01T00:00:00Z", "noticeDays": 0, "skus": [
        {"sku": "gpt", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "9.00", "completion_tokens": "9.00",
                                                          "requests": "0.001"},
         "passThrough": {"provider": "openai", "markupPct": "12.5", "costSecretRef": {"name": "openai-costs"}}}]})


def test_the_markup_is_applied_to_each_cost_and_the_skus_rate_fills_what_the_secret_lacks() -> None:
    usage = Usage("r1", datetime(2026, 2, 1, tzinfo=UTC), "ns/gpt", input_tokens=1_000_000, output_tokens=500_000)
    costs = {"openai-costs": cost_data({"prompt_tokens": "2.00", "completion_tokens": "8.00"})}
    line = rate(usage, Book("pb", 1, SPEC), Context(provider_costs=costs))
    assert isinstance(line, RatedLine)
    parts = {c.dimension: (c.rate, c.source) for c in line.components}
    assert parts["prompt_tokens"] == (Decimal("2.250"), "passThrough:openai")
    assert parts["completion_tokens"] == (Decimal("9.000"), "passThrough:openai")
    assert parts["requests"] == (Decimal("0.001"), "rate")  # not in the Secret: the SKU's rate
    assert line.amount == Decimal("2.25") + Decimal("4.5") + Decimal("0.001")
    missing = rate(usage, Book("pb", 1, SPEC), Context())
    assert isinstance(missing, Unpriced) and "openai-costs is missing or unreadable" in missing.reason


def test_a_declared_unit_must_be_the_skus() -> None:
    data = {"unit": "per-1K-tokens\n", "prompt_tokens": "0.002"}
    assert cost_data(data) == {"prompt_tokens": Decimal("0.002")} and cost_unit(data) == "per-1K-tokens"
    assert cost_unit({"prompt_tokens": "1"}) is None
    usage = Usage("r1", datetime(2026, 2, 1, tzinfo=UTC), "ns/gpt", input_tokens=1000)
    costs = {"openai-costs": cost_data(data)}
    wrong = rate(usage, Book("pb", 1, SPEC), Context(provider_costs=costs,
                                                    provider_units={"openai-costs": "per-1K-tokens"}))
    assert isinstance(wrong, Unpriced)  # 1000x too cheap otherwise
    assert "priced per-1M-tokens, but its cost Secret openai-costs gives rates per-1K-tokens" in wrong.reason
    right = rate(usage, Book("pb", 1, SPEC), Context(provider_costs=costs,
                                                    provider_units={"openai-costs": "per-1M-tokens"}))
    assert isinstance(right, RatedLine)
    book = SPEC.model_dump(by_alias=True, mode="json")
    assert unit_mismatches({"spec": book}, "openai-costs", "per-1K-tokens") == ["gpt (per-1M-tokens)"]
    assert unit_mismatches({"spec": book}, "openai-costs", "per-1M-tokens") == []
    assert unit_mismatches({"spec": book}, "openai-costs", None) == []
