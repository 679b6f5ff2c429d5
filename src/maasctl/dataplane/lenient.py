"""Numbers read the way a lax backend reads them (pydantic: "30000", 30000.0): a completion limit, a choice
count, a token count, wherever reading more is the safe side."""

from __future__ import annotations

import math
from typing import Any

from maasctl.contract.usage import MAX_TOKENS

__all__ = ["lenient_int"]


def lenient_int(value: Any) -> int | None:
    """`value` as a whole number the way a lax reader (pydantic: "30000", 30000.0) may take it, rounded up and
    capped at MAX_TOKENS; None when it is no number (bools included). Only for readings where more is safer."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return min(value, MAX_TOKENS)
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return MAX_TOKENS if number == math.inf else None
    return min(math.ceil(number), MAX_TOKENS)
