"""Re-rating's pure rule (rules/rerating.py): a pass-through SKU re-rates a charged record with the provider cost
its charge recorded (the cost in force when it was rated, never today's Secret) and the corrected markup; a
charge that kept no cost, another provider's cost or another unit is refused with a reason, never re-priced."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from maasctl.billing.api.pricebook import PriceBookSpec
from maasctl.billing.rules.rating import Book, Context, RatedLine, Unpriced, Usage, cost_data, rate
from maasctl.billing.rules.rerating import charged_costs, context_for


def spec(markup: str, *, provider: str = "openai", unit: str = "per-1M-tokens", secret: str = "openai-costs",
         pass_through: bool = True) -> PriceBookSpec:
    sku: dict[str, Any] = {"sku": "gpt", "unit": unit, "rates": {"prompt_tokens": "9.00", "completion_tokens": "9.00",
                                                                "requests": "0.001"}}
    if pass_through:
        sku["passThrough"] = {"provider": provider, "markupPct": markup, "costSecretRef": {"name": secret}}
    return PriceBookSpec.model_validate({"currency": "USD", "effectiveFrom": "2026-01-01T00:00:00Z",
                                         "noticeDays": 0, "skus": [sku]})


USAGE = Usage("r1", datetime(2026, 2, 1, tzinfo=UTC), "ns/gpt", input_tokens=1_000_000, output_tokens=500_000)
COSTS = {"openai-costs": cost_data({"prompt_tokens": "2.00", "completion_tokens": "8.00"})}


def charged(markup: str = "250", **kw: Any) -> dict[str, Any]:
    """The details of a charge rated with a (mistaken) markup and the costs above, as the ledger keeps them."""
    line = rate(USAGE, Book("pb", 1, spec(markup, **kw)), Context(provider_costs=COSTS))
    assert isinstance(line, RatedLine)
    return line.details()


def again(book: PriceBookSpec, details: dict[str, Any]) -> RatedLine | Unpriced | str:
    ctx = context_for(Book("pb-fixed", 1, book), USAGE, details, Context())
    return rate(USAGE, Book("pb-fixed", 1, book), ctx) if isinstance(ctx, Context) else ctx


def test_a_charge_keeps_the_cost_and_the_markup_of_each_passed_through_dimension() -> None:
    details = charged("250")
    prompt = details["components"]["prompt_tokens"]
    assert (prompt["cost"], prompt["markupPct"], prompt["rate"]) == ("2.00", "250", "7.000")
    assert "cost" not in details["components"]["requests"]  # the SKU's own rate: nothing passed through
    assert charged_costs(details) == ("openai", "per-1M-tokens",
                                      {"prompt_tokens": Decimal("2.00"), "completion_tokens": Decimal("8.00")})


def test_the_corrected_markup_applies_to_the_cost_the_record_was_charged_with() -> None:
    line = again(spec("25"), charged("250"))
    assert isinstance(line, RatedLine)
    assert line.amount == Decimal("2.00") * Decimal("1.25") + Decimal("4.00") * Decimal("1.25") + Decimal("0.001")
    assert {c.dimension: c.source for c in line.components}["prompt_tokens"] == "passThrough:openai"
    # Exactly what the rater charges with the corrected book and the Secret of that time: never twice apart.
    direct = rate(USAGE, Book("pb-fixed", 1, spec("25")), Context(provider_costs=COSTS))
    assert isinstance(direct, RatedLine) and direct.amount == line.amount


def test_a_corrected_sku_without_pass_through_ignores_the_recorded_cost() -> None:
    line = again(spec("25", pass_through=False), charged("250"))
    assert isinstance(line, RatedLine) and line.amount == Decimal("9.00") + Decimal("4.50") + Decimal("0.001")


@pytest.mark.parametrize(("details", "book", "why"), [
    (charged("0", pass_through=False), spec("25"), "kept no provider cost"),
    (charged("250", provider="anthropic"), spec("25"), "record was charged with anthropic's"),
    ({**charged("250"), "components": {"prompt_tokens": {"source": "passThrough:openai", "rate": "7.00"}}},
     spec("25"), "kept no provider cost"),  # rated before costs were recorded
    ({**charged("250"), "components": {"prompt_tokens": {"source": "passThrough:openai", "cost": "-1"}}},
     spec("25"), "kept no provider cost"),
    ({**charged("250"), "components": {"images": {"source": "passThrough:openai", "cost": "1.00"}}},
     spec("25"), "kept no provider cost"),
    ({}, spec("25"), "kept no provider cost"),
])
def test_a_charge_without_a_usable_cost_is_not_re_rated_by_a_pass_through_sku(
        details: dict[str, Any], book: PriceBookSpec, why: str) -> None:
    got = again(book, details)
    assert isinstance(got, str) and why in got


def test_costs_recorded_in_another_unit_are_not_applied_to_the_corrected_unit() -> None:
    got = again(spec("25", unit="per-1K-tokens"), charged("250"))
    assert isinstance(got, Unpriced) and "gives rates per-1M-tokens" in got.reason  # 1000x too dear otherwise
