"""Rate-limit window strings: validation and conversion to seconds.

Two grammars meet here:
- A MaaSSubscription `tokenRateLimits[].window` (seed 000): `^[1-9]\\d{0,3}(s|m|h)$`, i.e. 1-9999 of one unit,
  no days (`24h`, not `1d`). `parse_window` accepts exactly this.
- Kuadrant's `rates[].window` (and HTTPRoute timeouts): the Gateway API duration
  `^([0-9]{1,5}(h|m|s|ms)){1,4}$`. Kuadrant converts it with Go's `time.ParseDuration` and truncates to whole
  seconds. `duration_seconds` reproduces that, so the local gateway counts windows exactly as Limitador would.

Every subscription window is also a valid Kuadrant duration, so the TRLP builder can copy it verbatim.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "KUADRANT_DURATION_PATTERN",
    "SUBSCRIPTION_WINDOW_PATTERN",
    "InvalidWindowError",
    "duration_milliseconds",
    "duration_seconds",
    "is_valid_duration",
    "is_valid_window",
    "parse_window",
]

SUBSCRIPTION_WINDOW_PATTERN: Final = r"^[1-9]\d{0,3}(s|m|h)$"
KUADRANT_DURATION_PATTERN: Final = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"

# `\d` in Python matches non-ASCII digits; the CRD (Go RE2 / JSON schema) patterns do not, hence [0-9].
_WINDOW_RE: Final = re.compile(r"[1-9][0-9]{0,3}(s|m|h)")
_DURATION_RE: Final = re.compile(r"(?:[0-9]{1,5}(?:h|ms|m|s)){1,4}")
_SEGMENT_RE: Final = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


class InvalidWindowError(ValueError):
    """A window or duration string does not match its grammar."""


def is_valid_window(window: str) -> bool:
    """True if `window` is a valid MaaSSubscription window (`1m`, `24h`, ...)."""
    return _WINDOW_RE.fullmatch(window) is not None


def parse_window(window: str) -> int:
    """Seconds of a MaaSSubscription window.

    Raises:
        InvalidWindowError: not `^[1-9]\\d{0,3}(s|m|h)$` (e.g. `1d`, `0m`, `90`, `1.5h`).
    """
    if not is_valid_window(window):
        raise InvalidWindowError(
            f"invalid window {window!r}: expected 1-9999 followed by s, m or h (e.g. 1m, 24h)"
        )
    return int(window[:-1]) * _UNIT_MS[window[-1]] // 1000


def is_valid_duration(duration: str) -> bool:
    """True if `duration` matches the Gateway API / Kuadrant duration pattern."""
    return _DURATION_RE.fullmatch(duration) is not None


def duration_milliseconds(duration: str) -> int:
    """Milliseconds of a Gateway API duration (`1h30m`, `500ms`, `300s`).

    Raises:
        InvalidWindowError: the string does not match `^([0-9]{1,5}(h|m|s|ms)){1,4}$`.
    """
    if not is_valid_duration(duration):
        raise InvalidWindowError(f"invalid duration {duration!r}: expected e.g. 300s, 1h30m, 500ms")
    return sum(int(n) * _UNIT_MS[unit] for n, unit in _SEGMENT_RE.findall(duration))


def duration_seconds(duration: str) -> int:
    """Whole seconds of a Kuadrant window, truncated as Kuadrant does (`1500ms` -> 1, `500ms` -> 0)."""
    return duration_milliseconds(duration) // 1000
