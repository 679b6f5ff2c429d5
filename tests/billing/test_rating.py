"""Rating is a pure function: the seed's rates, every rule of the docstring, and properties (deterministic,
additive, never a float, never negative)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing import money
from maasctl.billing.api.pricebook import PriceBookSpec
from maasctl.billing.rules.rating import Book, Context, RatedLine, Unpriced, Usage, committed_fee, rate, unit_divisors

T = datetime(2026, 9, 10, tzinfo=UTC)


def book(**extra: Any) -> Book:
    spec = {"currency": "USD", "effectiveFrom": "2026-09-01T00:00:00Z", "noticeDays": 0, "skus": [
        {"sku": "llama-3-70b", "unit": "per-1M-tokens",
         "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "reasoning_tokens": "10.00",
                   "cached_tokens": "0.625"}},
        {"sku": "llama-3-70b", "geo": "eu-west", "unit": "per-1M-tokens",
         "rates": {"prompt_tokens": "3.00", "completion_tokens": "12.00"}},
        {"sku": "models/granite", "unit": "per-1K-tokens", "rates": {"prompt_tokens": "0.001", "requests": "0.0001"}},
        {"sku": "h200-mig-3g.40gb", "unit": "per-gpu-second", "rates": {"gpu_seconds": "0.001250"}},
        {"sku": "gpt-4o", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1", "completion_tokens": "1"},
         "passThrough": {"provider": "openai", "markupPct": "15.0", "costSecretRef": {"name": "openai-cost"}}},
        {"sku": "odd", "unit": "per-image", "rates": {"images": "0.02"}},
    ], **extra}
    return Book("pb-standard", 3, PriceBookSpec.model_validate(spec))


def use(**kw: Any) -> Usage:
    base: dict[str, Any] = {"record_id": "r1", "time": T, "model": "team/llama-3-70b"}
    return Usage(**{**base, **kw})


def line(result: RatedLine | Unpriced) -> RatedLine:
    assert isinstance(result, RatedLine), result
    return result


def test_the_seeds_rates_per_million_tokens() -> None:
    got = line(rate(use(input_tokens=1000, cached_tokens=200, output_tokens=500, reasoning_tokens=100), book()))
    # 800 prompt x 2.50 + 200 cached x 0.625 + 400 completion x 10 + 100 reasoning x 10, per million
    assert got.amount == Decimal("0.007125")
    assert {c.dimension: c.quantity for c in got.components} == {
        "prompt_tokens": 800, "cached_tokens": 200, "completion_tokens": 400, "reasoning_tokens": 100}
    assert (got.book, got.generation, got.record_id, got.sku, got.geo) == ("pb-standard", 3, "r1", "llama-3-70b", "")
    details = got.details()
    assert details["priceBook"] == "pb-standard" and details["generation"] == 3 and details["record"] == "r1"
    assert details["amount"] == "0.007125"


def test_cached_and_reasoning_fall_back_to_prompt_and_completion_rates() -> None:
    got = line(rate(use(input_tokens=1000, cached_tokens=200, output_tokens=500, reasoning_tokens=100),
                    book(), Context(geo="eu-west")))
    assert got.geo == "eu-west"
    assert got.amount == Decimal("0.009")  # 1000 x 3 + 500 x 12, per million


def test_geo_falls_back_to_the_default_sku() -> None:
    assert line(rate(use(input_tokens=10**6), book(), Context(geo="us-east"))).amount == Decimal("2.5")


def test_sku_by_qualified_name_requests_and_small_units() -> None:
    got = line(rate(use(model="models/granite", input_tokens=1500), book()))
    assert got.amount == Decimal("0.0016")  # 1.5 x 0.001 + 1 request x 0.0001


def test_gpu_seconds() -> None:
    got = line(rate(use(model="x/h200-mig-3g.40gb", gpu_seconds=Decimal("3600")), book()))
    assert got.amount == Decimal("4.5")


def test_unpriced_models_and_units_are_reported_not_free() -> None:
    missing = rate(use(model="team/unknown"), book())
    assert isinstance(missing, Unpriced) and "no SKU of PriceBook pb-standard prices model 'team/unknown'" in \
        missing.reason
    odd = rate(use(model="a/odd"), book())
    assert isinstance(odd, Unpriced) and "unit 'per-image'" in odd.reason
    no_secret = rate(use(model="a/gpt-4o"), book())
    assert isinstance(no_secret, Unpriced) and "openai-cost is missing" in no_secret.reason


def test_pass_through_costs_plus_markup() -> None:
    costs = {"openai-cost": {"prompt_tokens": Decimal("2.00")}}
    got = line(rate(use(model="a/gpt-4o", input_tokens=10**6, output_tokens=10**6), book(),
                    Context(provider_costs=costs)))
    # prompt: 2.00 x 1.15 (pass-through); completion: the SKU's own 1
    assert got.amount == Decimal("3.3")
    sources = {c.dimension: c.source for c in got.components}
    assert sources == {"prompt_tokens": "passThrough:openai", "completion_tokens": "rate"}


def test_fault_policies() -> None:
    usage = {"input_tokens": 10**6}
    assert line(rate(use(termination="upstream_error", **usage), book())).amount == 0  # zero_charge default
    partial = book(providerFaultPolicy="bill_partial", clientDisconnectPolicy="zero_charge")
    assert line(rate(use(termination="upstream_error", **usage), partial)).amount == Decimal("2.5")
    assert line(rate(use(status=502, **usage), book())).policy == "providerFaultPolicy=zero_charge"
    assert line(rate(use(termination="client_disconnect", **usage), book())).amount == Decimal("2.5")
    zero = line(rate(use(termination="client_disconnect", **usage), partial))
    assert zero.amount == 0 and zero.policy == "clientDisconnectPolicy=zero_charge"
    assert line(rate(use(termination="refused", status=429, **usage), book())).amount == 0


def test_estimated_records_are_rated_as_recorded_and_keep_the_flag() -> None:
    got = line(rate(use(input_tokens=100, output_tokens=4096, estimated=True,
                        estimate_reason="usage unreadable (truncated)", termination="truncated"), book()))
    assert got.estimated and got.details()["estimateReason"] == "usage unreadable (truncated)"
    assert got.amount == Decimal("0.041210")


def test_volume_tiers_apply_on_month_to_date_tokens_before_the_record() -> None:
    tiers = book(volumeTiers=[{"thresholdTokens": 1000, "discountPct": "8"},
                              {"thresholdTokens": 5000, "discountPct": "20"}])
    usage = use(input_tokens=10**6)
    assert line(rate(usage, tiers, Context(month_tokens_before=999))).amount == Decimal("2.5")
    assert line(rate(usage, tiers, Context(month_tokens_before=1000))).amount == Decimal("2.3")
    assert line(rate(usage, tiers, Context(month_tokens_before=10**9))).amount == Decimal("2")


def test_committed_use_makes_included_tokens_free_pro_rata() -> None:
    committed = book(committedUse=[{"name": "starter", "tokensPerSecond": 1, "monthlyPrice": "100"}])
    included = 30 * 86400  # September
    assert committed_fee(committed.spec, "starter") == Decimal("100")
    inside = line(rate(use(input_tokens=10**6), committed, Context(committed_tier="starter")))
    assert inside.amount == 0 and inside.committed_tokens == 10**6
    half = line(rate(use(input_tokens=10**6), committed,
                     Context(committed_tier="starter", month_tokens_before=included - 500_000)))
    assert half.amount == Decimal("1.25") and half.committed_tokens == 500_000


def test_units() -> None:
    assert unit_divisors("per-1M-tokens") == (10**6, 1)
    assert unit_divisors("per-1K-tokens") == (1000, 1)
    assert unit_divisors("per-token") == (1, 1)
    assert unit_divisors("per-gpu-hour") == (1, 3600)
    assert unit_divisors("per-request") == (1, 1)
    assert unit_divisors("per-fortnight") is None


def test_rounding_is_half_even_once_per_line() -> None:
    # 1 prompt token at 2.50 per million = 0.0000025 -> 0.000002 (half-even), 3 tokens = 0.0000075 -> 0.000008
    assert line(rate(use(input_tokens=1), book())).amount == Decimal("0.000002")
    assert line(rate(use(input_tokens=3), book())).amount == Decimal("0.000008")


counts = st.integers(min_value=0, max_value=10**9)
usages = st.builds(lambda i, c, o, r, term, model: use(input_tokens=i, cached_tokens=min(c, i), output_tokens=o,
                                                       reasoning_tokens=min(r, o), termination=term, model=model),
                   counts, counts, counts, counts,
                   st.sampled_from(["complete", "client_disconnect", "upstream_error", "truncated", "refused"]),
                   st.sampled_from(["t/llama-3-70b", "models/granite", "t/gpt-4o"]))
contexts = st.builds(Context, geo=st.sampled_from(["", "eu-west", "us-east"]),
                     month_tokens_before=st.integers(0, 2 * 10**9),
                     provider_costs=st.just({"openai-cost": {"prompt_tokens": Decimal("2.2")}}))
BOOK = book(volumeTiers=[{"thresholdTokens": 10**6, "discountPct": "8"}])


def _no_float(value: Any) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(_no_float(v) for v in value.values())
    return True


@given(usages, contexts)
def test_property_deterministic_never_negative_never_a_float(usage: Usage, ctx: Context) -> None:
    first, second = rate(usage, BOOK, ctx), rate(usage, BOOK, ctx)
    assert first == second
    got = line(first)
    assert got.amount >= 0 and got.amount == money.quantize(got.exact)
    assert all(isinstance(x, Decimal) for c in got.components for x in (c.quantity, c.rate, c.amount))
    assert isinstance(got.amount, Decimal) and _no_float(got.details())
    assert money.parse(got.details()["amount"]) == got.amount


@given(counts, counts, counts, counts, contexts)
def test_property_additive(i1: int, o1: int, i2: int, o2: int, ctx: Context) -> None:
    """Two records priced together cost what they cost apart (exactly before rounding; the rounded lines of the
    parts differ from the rounded whole by at most one micro-unit each). The request fee is per request."""
    a = line(rate(use(input_tokens=i1, output_tokens=o1), BOOK, ctx))
    b = line(rate(use(input_tokens=i2, output_tokens=o2), BOOK, ctx))
    ab = line(rate(use(input_tokens=i1 + i2, output_tokens=o1 + o2), BOOK, ctx))
    assert ab.exact == a.exact + b.exact
    assert abs(ab.amount - (a.amount + b.amount)) <= Decimal("0.000001")
