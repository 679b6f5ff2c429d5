"""Money: decimal strings in, Decimal inside, the same strings out; one rounding rule; floats refused."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing import money

amounts = st.from_regex(r"\A[0-9]{1,24}(\.[0-9]{1,6})?\Z")


@given(amounts)
def test_every_money_string_round_trips_exactly(text: str) -> None:
    out = money.fmt(money.parse(text))
    assert money.parse(out) == money.parse(text)
    assert out.partition(".")[2] == text.partition(".")[2]  # the written precision is kept
    assert re.fullmatch(money.MONEY_PATTERN.strip("^$"), out)


@given(amounts, amounts)
def test_sums_are_exact(a: str, b: str) -> None:
    total = money.CONTEXT.add(money.parse(a), money.parse(b))
    assert money.quantize(total) == total  # six places in, six places out: no rounding needed


@pytest.mark.parametrize("value", [2.5, 1, True, None, "2.5e3", "-1", "+1", "1.", ".5", "1.1234567", " 1", "1,5",
                                   "NaN", "Infinity", Decimal("NaN"), Decimal("-1"), Decimal("0.0000001"), "1" * 25])
def test_non_money_is_refused(value: object) -> None:
    with pytest.raises(money.MoneyError):
        money.parse(value)


def test_rounding_is_half_even_to_six_places() -> None:
    assert money.quantize(Decimal("0.0000005")) == Decimal("0.000000")
    assert money.quantize(Decimal("0.0000015")) == Decimal("0.000002")
    assert money.quantize(Decimal("2.5")) == Decimal("2.500000")


def test_trailing_zeros_are_kept_as_written() -> None:
    assert money.fmt(money.parse("10.00")) == "10.00"
    assert money.fmt(Decimal("1E+3")) == "1000"
