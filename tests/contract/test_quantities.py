"""Token quantities and window names as administrators type them (seed 004)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.quantities import (
    MAX_TOKEN_LIMIT,
    InvalidQuantityError,
    format_tokens,
    format_window,
    parse_limit,
    parse_tokens,
    parse_window_name,
)
from maasctl.contract.windows import InvalidWindowError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100M", 100_000_000),
        ("1000M", 1_000_000_000),
        ("1.5B", 1_500_000_000),
        ("2.25b", 2_250_000_000),
        ("250k", 250_000),
        ("250K", 250_000),
        ("3T", 3_000_000_000_000),
        ("5000", 5000),
        ("1_000_000", 1_000_000),
        ("1,000,000", 1_000_000),
        (" 7 M ", 7_000_000),
        ("0.5k", 500),
        ("4G", 4_000_000_000),
    ],
)
def test_parse_tokens(text: str, value: int) -> None:
    assert parse_tokens(text) == value


@pytest.mark.parametrize("text", ["", "M", "1.0005k", "1.5", "10X", "-5M", "1e6", "1..5M", "1,", "1__0_", "½M"])
def test_parse_tokens_refuses(text: str) -> None:
    with pytest.raises(InvalidQuantityError):
        parse_tokens(text)


def test_parse_limit_bounds() -> None:
    assert parse_limit("1") == 1
    assert parse_limit("1T") == MAX_TOKEN_LIMIT
    assert parse_limit("5B") == 5_000_000_000  # several billion a day is a valid daily limit
    for text in ("0", "1.001T", "2T"):
        with pytest.raises(InvalidQuantityError):
            parse_limit(text)


@pytest.mark.parametrize(
    ("text", "window"),
    [("Minute", "1m"), ("hour", "1h"), ("DAY", "24h"), ("per Hour", "1h"), ("1 day", "24h"), ("hours", "1h"),
     ("30m", "30m"), ("24h", "24h")],
)
def test_parse_window_name(text: str, window: str) -> None:
    assert parse_window_name(text) == window


@pytest.mark.parametrize("text", ["week", "1d", "", "0m", "fortnight"])
def test_parse_window_name_refuses(text: str) -> None:
    with pytest.raises(InvalidWindowError):
        parse_window_name(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [(100_000_000, "100M"), (1_500_000_000, "1.5B"), (1234, "1.234k"), (999, "999"), (1_000_000_000_000, "1T"),
     (123_456_789, "123456789")],
)
def test_format_tokens(value: int, text: str) -> None:
    assert format_tokens(value) == text


@given(st.integers(min_value=1, max_value=MAX_TOKEN_LIMIT))
def test_format_then_parse_is_exact(value: int) -> None:
    assert parse_tokens(format_tokens(value)) == value


def test_format_window() -> None:
    assert [format_window(w) for w in ("1m", "1h", "24h", "30m")] == ["Minute", "Hour", "Day", "30m"]
