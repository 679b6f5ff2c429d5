"""Token limits as administrators type and read them: "100M tokens per Hour, 1000M per Day" <-> the
CRD's `tokenRateLimits` (contract.quantities does the numbers and windows)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from maasctl.contract.quantities import (
    InvalidQuantityError,
    format_tokens,
    format_window,
    parse_limit,
    parse_window_name,
)
from maasctl.contract.windows import InvalidWindowError

UNLIMITED = "unlimited"
_TIER = re.compile(r"([0-9][0-9_,.]*\s*[A-Za-z]?)\s*(?:tokens?\s*)?(?:per|/)\s*([A-Za-z0-9]+)", re.IGNORECASE)
_SEPARATORS = re.compile(r"^[\s,;]*$")


class TierError(ValueError):
    """Text that is not a list of tiers (message safe to show next to the field)."""


def from_text(text: str) -> list[dict[str, Any]] | None:
    """`tokenRateLimits` entries for "100M per Hour, 1B tokens per Day"; None for "unlimited"."""
    raw = text.strip()
    if raw.lower() == UNLIMITED:
        return None
    if not raw:
        raise TierError('enter at least one limit, e.g. "100M per Hour" (or "unlimited")')
    limits: list[dict[str, Any]] = []
    rest = _TIER.sub(" ", raw)
    if not _SEPARATORS.match(rest):
        raise TierError(f'cannot read {rest.strip(" ,;")!r}: write limits like "100M per Hour, 1000M per Day"')
    for quantity, window in _TIER.findall(raw):
        try:
            limits.append({"limit": parse_limit(quantity.strip()), "window": parse_window_name(window)})
        except (InvalidQuantityError, InvalidWindowError) as exc:
            raise TierError(str(exc)) from exc
    windows = [x["window"] for x in limits]
    if len(set(windows)) != len(windows):
        raise TierError("each window may appear only once per model")
    return limits


def to_text(limits: Iterable[Mapping[str, Any]] | None) -> str:
    """The form's text for existing limits ("unlimited" for none)."""
    if limits is None:
        return UNLIMITED
    return ", ".join(f"{format_tokens(int(x['limit']))} per {format_window(str(x['window']))}" for x in limits)
