"""Re-rating's pure rule (rules/rerating.py): a pass-through SKU re-rates a charged record with the provider cost
its charge recorded (the cost in force when it was rated, never today's Secret) and the corrected markup; a
charge that kept no cost, another provider's cost or another unit is refused with a reason, never re-priced."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def test_the_tenant_portal_does_not_show_the_provider_cost_a_charge_keeps() -> None:
    from maasctl.billing.controller.portal_api import tenant_details

    details = charged("250")
    shown = tenant_details(details)
    assert shown["components"]["prompt_tokens"] == {k: v for k, v in details["components"]["prompt_tokens"].items()
                                                    if k not in ("cost", "markupPct")}
    assert "2.00" not in str(shown) and "250" not in str(shown)
    assert details["components"]["prompt_tokens"]["cost"] == "2.00"  # the ledger's copy is untouched
    assert tenant_details({"records": {"r": "1.0"}}) == {"records": {"r": "1.0"}}  # other entries as they are


def test_cost_data_given_for_the_period_replaces_what_the_charges_recorded() -> None:
    given = Context(provider_costs={"openai-costs": {"prompt_tokens": Decimal("1.00")}})
    for details in (charged("250"), {**charged("250"), "components": {}}):  # recorded, or rated before costs were
        ctx = context_for(Book("pb-fixed", 1, spec("25")), USAGE, details, given)
        assert ctx is given
        line = rate(USAGE, Book("pb-fixed", 1, spec("25")), ctx)
        assert isinstance(line, RatedLine)  # completion_tokens is not in the given data: the SKU's rate
        assert line.amount == Decimal("1.00") * Decimal("1.25") + Decimal("4.50") + Decimal("0.001")


@pytest.mark.parametrize(("content", "why"), [
    ({"stringData": {"prompt_tokens": "-7.77"}}, "'prompt_tokens' is not a non-negative decimal"),
    ({"stringData": {"images": "7.77"}}, "'images' are not dimensions"),
    ({"data": {"prompt_tokens": "/w=="}}, "'prompt_tokens' is not UTF-8"),
    ({"data": ["7.77"]}, "is not a Secret"),
    ({"metadata": {}}, "is not a Secret"),
    ([{"metadata": {"name": "openai-costs"}}], "is not a Secret"),
    ("7.77", "is not a Secret"),
    ({}, "holds no rate"),
])
def test_a_cost_file_that_is_not_cost_data_is_refused_naming_the_key_never_the_value(
        tmp_path: Path, content: Any, why: str) -> None:
    from maasctl.billing.cli.ledger import _cost_files

    if isinstance(content, dict):
        content = {"kind": "Secret", "metadata": {"name": "openai-costs"}, **content}
    path = tmp_path / "costs.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(ValueError, match=why) as exc:
        _cost_files([str(path)])
    assert "7.77" not in str(exc.value) and str(path) in str(exc.value)
    with pytest.raises(ValueError, match="cannot be read"):
        _cost_files([str(tmp_path / "missing.yaml")])


def test_a_cost_file_gives_rates_and_a_unit_by_the_secrets_name(tmp_path: Path) -> None:
    from maasctl.billing.cli.ledger import _cost_files

    path = tmp_path / "costs.yaml"
    path.write_text(yaml.safe_dump({"kind": "Secret", "metadata": {"name": "openai-costs"},
                                    "data": {"prompt_tokens": "Mi41MA=="},  # 2.50
                                    "stringData": {"unit": "per-1M-tokens", "completion_tokens": "10.00\n"}}))
    assert _cost_files([str(path)]) == ({"openai-costs": {"prompt_tokens": Decimal("2.50"),
                                                          "completion_tokens": Decimal("10.00")}},
                                        {"openai-costs": "per-1M-tokens"})
