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


# What the API server's RE2 `^...$` refuses must be refused here too: Python's `$` matches before a final "\n".
NOT_MONEY_TEXT = ["200.00\n", "1\n", "1\r\n", "1\r", "\n1", " 1", "1 ", "\t1", "1\x00", "1\u2028", "\u0663",
                  "1\u0663", "\uff11", "1.\u0665", "+1", "-1", "--1", "1e3", "1E3", "2.5e3", "1.", ".5", ".", "",
                  "1.1234567", "1,5", "1_000", "0x10", "NaN", "Infinity", "1" * 25, "1" * 25 + ".5", "1" * 26,
                  "9" * 24 + ".9999999", "1" * 40]


@pytest.mark.parametrize("value", [2.5, 1, True, None, *NOT_MONEY_TEXT, Decimal("NaN"), Decimal("-1"),
                                   Decimal("0.0000001"), Decimal("1E+24"), Decimal("1" * 25)])
def test_non_money_is_refused(value: object) -> None:
    with pytest.raises(money.MoneyError):
        money.parse(value)
    assert not money.is_money(value)


@pytest.mark.parametrize("text", [t for t in NOT_MONEY_TEXT if t != "-1"])
def test_signed_parsing_refuses_the_same_text(text: str) -> None:
    for candidate in (text, "-" + text):
        with pytest.raises(money.MoneyError):
            money.parse_signed(candidate)


def test_the_bound_is_every_digit_the_dot_and_every_decimal() -> None:
    longest = "9" * money.MAX_DIGITS + "." + "9" * money.PLACES
    assert len(longest) == money.MAX_LENGTH and money.parse(longest) == Decimal(longest)
    assert money.parse_signed("-" + longest) == -Decimal(longest)
    assert len("-" + longest) == money.SIGNED_MAX_LENGTH
    assert money.parse("1" * money.MAX_DIGITS) == Decimal("1" * money.MAX_DIGITS)
    assert money.parse(Decimal("1E+23")) == Decimal("1E+23")  # 24 digits written out


@given(amounts, st.sampled_from(["\n", "\r\n", " ", "\t", "\u00a0", "\u0663", "x", "+", "-", "e1", "."]),
       st.booleans())
def test_anything_around_an_amount_is_refused(text: str, extra: str, before: bool) -> None:
    with pytest.raises(money.MoneyError):
        money.parse(extra + text if before else text + extra)


def test_the_crd_pattern_is_the_one_the_code_applies() -> None:
    """`^`/`$` are RE2 anchors in the CRDs; Python checks the same pattern with `fullmatch`."""
    assert rf"^[0-9]{{1,{money.MAX_DIGITS}}}(\.[0-9]{{1,{money.PLACES}}})?$" == money.MONEY_PATTERN
    assert "^-?" + money.MONEY_PATTERN[1:] == money.SIGNED_PATTERN


def test_rounding_is_half_even_to_six_places() -> None:
    assert money.quantize(Decimal("0.0000005")) == Decimal("0.000000")
    assert money.quantize(Decimal("0.0000015")) == Decimal("0.000002")
    assert money.quantize(Decimal("2.5")) == Decimal("2.500000")


def test_trailing_zeros_are_kept_as_written() -> None:
    assert money.fmt(money.parse("10.00")) == "10.00"
    assert money.fmt(Decimal("1E+3")) == "1000"
