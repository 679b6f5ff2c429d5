"""Window strings: the subscription grammar and Kuadrant's duration grammar."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.windows import (
    KUADRANT_DURATION_PATTERN,
    SUBSCRIPTION_WINDOW_PATTERN,
    InvalidWindowError,
    duration_milliseconds,
    duration_seconds,
    is_valid_duration,
    is_valid_window,
    parse_window,
)


@pytest.mark.parametrize(
    ("window", "seconds"),
    [
        pytest.param("1s", 1, id="second"),
        pytest.param("1m", 60, id="minute"),
        pytest.param("1h", 3600, id="hour"),
        pytest.param("24h", 86400, id="day-in-hours"),
        pytest.param("9999h", 9999 * 3600, id="max"),
        pytest.param("90m", 5400, id="ninety-minutes"),
    ],
)
def test_parse_window(window: str, seconds: int) -> None:
    assert is_valid_window(window)
    assert parse_window(window) == seconds


@pytest.mark.parametrize(
    "window",
    [
        pytest.param("1d", id="days-not-accepted"),
        pytest.param("0m", id="zero"),
        pytest.param("01m", id="leading-zero"),
        pytest.param("10000s", id="five-digits"),
        pytest.param("1.5h", id="decimal"),
        pytest.param("90", id="no-unit"),
        pytest.param("1ms", id="milliseconds"),
        pytest.param("1h30m", id="compound"),
        pytest.param("", id="empty"),
        pytest.param(" 1m", id="leading-space"),
        pytest.param("1m\n", id="trailing-newline"),
        pytest.param("\u0661m", id="non-ascii-digit"),
    ],
)
def test_invalid_windows(window: str) -> None:
    assert not is_valid_window(window)
    with pytest.raises(InvalidWindowError):
        parse_window(window)


@pytest.mark.parametrize(
    ("duration", "ms", "seconds"),
    [
        pytest.param("300s", 300_000, 300, id="seconds"),
        pytest.param("1h30m", 5_400_000, 5400, id="compound"),
        pytest.param("1500ms", 1500, 1, id="ms-truncated"),
        pytest.param("500ms", 500, 0, id="sub-second-is-zero"),
        pytest.param("0s", 0, 0, id="zero"),
        pytest.param("1h1m1s1ms", 3_661_001, 3661, id="four-segments"),
    ],
)
def test_duration(duration: str, ms: int, seconds: int) -> None:
    assert is_valid_duration(duration)
    assert duration_milliseconds(duration) == ms
    assert duration_seconds(duration) == seconds


@pytest.mark.parametrize(
    "duration",
    [
        pytest.param("1d", id="days"),
        pytest.param("1h1m1s1ms1h", id="five-segments"),
        pytest.param("123456s", id="six-digits"),
        pytest.param("1.5h", id="decimal"),
        pytest.param("s", id="no-number"),
        pytest.param("", id="empty"),
    ],
)
def test_invalid_durations(duration: str) -> None:
    assert not is_valid_duration(duration)
    with pytest.raises(InvalidWindowError):
        duration_seconds(duration)


@given(st.from_regex(re.compile(r"\A[1-9][0-9]{0,3}[smh]\Z")))
def test_every_subscription_window_is_a_kuadrant_duration(window: str) -> None:
    assert re.fullmatch(SUBSCRIPTION_WINDOW_PATTERN, window)
    assert re.fullmatch(KUADRANT_DURATION_PATTERN, window)
    assert duration_seconds(window) == parse_window(window) > 0


@given(st.text(max_size=8))
def test_validity_matches_crd_patterns(text: str) -> None:
    # The CRD patterns are RE2 with ASCII \d; Python's re with re.ASCII agrees.
    assert is_valid_window(text) == bool(re.fullmatch(SUBSCRIPTION_WINDOW_PATTERN, text, re.ASCII))
    assert is_valid_duration(text) == bool(re.fullmatch(KUADRANT_DURATION_PATTERN, text, re.ASCII))
