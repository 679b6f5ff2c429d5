"""Token limits the way administrators write them (seed 004: "100M tokens per hour, 1000M per day").

The CRD keeps plain integers (`tokenRateLimits[].limit`, `window` like `1h`); people type and read `100M`,
`1.5B`, `250k` and `Minute` / `Hour` / `Day`. This module converts both ways, exactly (Decimal, never a
float), for `maasctl` and the console, with the one upper bound the API types enforce.

- `parse_tokens("100M") == 100_000_000`; suffixes k/K (10^3), M (10^6), B/G (10^9), T (10^12), case-insensitive
  except that `m` is millions too (nobody means milli-tokens); underscores and commas between digits are
  allowed; a fraction must come out whole (`1.5k` is 1500, `1.0005k` is refused).
- `parse_window_name("Hour") == "1h"`; also accepts the window grammar itself (`1m`, `24h`).
- `format_tokens(100_000_000) == "100M"`, `format_window("24h") == "Day"`: the inverse for display.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

from maasctl.api._fields import MAX_TOKEN_LIMIT
from maasctl.contract.windows import InvalidWindowError, is_valid_window

__all__ = [
    "MAX_TOKEN_LIMIT",
    "WINDOW_NAMES",
    "InvalidQuantityError",
    "format_tokens",
    "format_window",
    "parse_limit",
    "parse_tokens",
    "parse_window_name",
]

_SUFFIX: Final = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_QUANTITY_RE: Final = re.compile(r"([0-9][0-9_,]*)(?:\.([0-9]+))?\s*([a-zA-Z]?)")
WINDOW_NAMES: Final = {"second": "1s", "minute": "1m", "hour": "1h", "day": "24h"}
_NAME_OF_WINDOW: Final = {"1s": "Second", "1m": "Minute", "1h": "Hour", "24h": "Day"}


class InvalidQuantityError(ValueError):
    """A token quantity or window name that cannot be read exactly."""


def parse_tokens(text: str) -> int:
    """Whole tokens of `100M`, `1.5B`, `250k`, `1_000_000`; raises InvalidQuantityError otherwise."""
    raw = text.strip()
    match = _QUANTITY_RE.fullmatch(raw)
    if match is None or match.group(1).endswith((",", "_")):
        raise InvalidQuantityError(f"{text!r} is not a token quantity (e.g. 100M, 1.5B, 250k, 5000)")
    whole, fraction, suffix = match.group(1).replace("_", "").replace(",", ""), match.group(2), match.group(3)
    multiplier = _SUFFIX.get(suffix.lower())
    if multiplier is None:
        raise InvalidQuantityError(f"{text!r}: unknown suffix {suffix!r} (use k, M, B or T)")
    try:
        value = Decimal(f"{whole}.{fraction}" if fraction else whole) * multiplier
    except InvalidOperation as exc:
        raise InvalidQuantityError(f"{text!r} is not a token quantity") from exc
    if value != value.to_integral_value():
        raise InvalidQuantityError(f"{text!r} is not a whole number of tokens")
    return int(value)


def parse_limit(text: str) -> int:
    """`parse_tokens` bounded as the CRD bounds `tokenRateLimits[].limit` (1 .. MAX_TOKEN_LIMIT)."""
    value = parse_tokens(text)
    if not 1 <= value <= MAX_TOKEN_LIMIT:
        raise InvalidQuantityError(f"{text!r}: a token limit must be between 1 and {format_tokens(MAX_TOKEN_LIMIT)}")
    return value


def parse_window_name(text: str) -> str:
    """`Minute`/`Hour`/`Day` (any case, also `per hour`, `1 hour`) or a window like `1h` -> the CRD window."""
    raw = text.strip().lower()
    raw = raw.removeprefix("per ").removeprefix("1 ").strip()
    if raw in WINDOW_NAMES:
        return WINDOW_NAMES[raw]
    if raw.endswith("s") and raw[:-1] in WINDOW_NAMES:
        return WINDOW_NAMES[raw[:-1]]
    if is_valid_window(raw):
        return raw
    raise InvalidWindowError(f"{text!r} is not a window: use Minute, Hour, Day or e.g. 30m, 24h")


def format_tokens(value: int) -> str:
    """The shortest exact form: 100000000 -> `100M`, 1500000000 -> `1.5B`, 1234 -> `1234`."""
    for suffix, multiplier in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if value >= multiplier:
            exact = Decimal(value) / multiplier
            text = format(exact.normalize(), "f")
            if len(text.replace(".", "")) <= 6:
                return f"{text}{suffix}"
    return str(value)


def format_window(window: str) -> str:
    """`1h` -> `Hour`, `24h` -> `Day`; other windows are shown as they are."""
    return _NAME_OF_WINDOW.get(window, window)
