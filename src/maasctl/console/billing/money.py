"""Amounts as the billing kinds write them (decimal strings, seed 002) shown with their currency: digits
grouped, trailing zeros beyond the currency's minor unit dropped, never rounded and never through a float (the
string is re-spaced, not converted). Anything that is not such a string is shown as not readable, not guessed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["amount", "currency_of", "quantity"]

_DECIMAL: Final = re.compile(r"^(-?)([0-9]{1,24})(?:\.([0-9]{1,6}))?$")
_MINOR_UNITS: Final = {"JPY": 0}  # seed 002's currencies; every other one has cents
UNREADABLE: Final = "(unreadable)"


def _parts(value: Any) -> tuple[str, str, str] | None:
    m = _DECIMAL.match(str(value)) if isinstance(value, str | int) and not isinstance(value, bool) else None
    return (m.group(1), m.group(2), m.group(3) or "") if m else None


def _grouped(whole: str) -> str:
    digits = whole.lstrip("0") or "0"
    head = len(digits) % 3 or 3
    return ",".join([digits[:head], *(digits[i:i + 3] for i in range(head, len(digits), 3))])


def quantity(value: Any, minimum_decimals: int = 0) -> str:
    """`12345.500` -> `12,345.5`: a decimal string re-spaced (days, tokens); empty -> an em dash."""
    if value is None or value == "":
        return "—"
    parts = _parts(value)
    if parts is None:
        return UNREADABLE
    sign, whole, frac = parts
    frac = frac.rstrip("0").ljust(minimum_decimals, "0")
    text = _grouped(whole) + (f".{frac}" if frac else "")
    return f"-{text}" if sign and text.strip("0.,") else text


def amount(value: Any, currency: str | None) -> str:
    """`-1234.5`, USD -> `-1,234.50 USD`; the currency's minor unit at least, every written digit kept."""
    text = quantity(value, _MINOR_UNITS.get(currency or "", 2))
    if text in ("—", UNREADABLE) or not currency:
        return text
    return f"{text} {currency}"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def currency_of(tenant: Mapping[str, Any], plans: Iterable[Mapping[str, Any]],
                books: Iterable[Mapping[str, Any]]) -> str | None:
    """The currency of the PriceBook a tenant uses (docs/billing.md, "Which PriceBook"): its pin, else its Plan's
    `priceBookRef` followed through the successors already in force; None when no book is known."""
    ns = (tenant.get("metadata") or {}).get("namespace")
    local = {_name(b): b for b in books if (b.get("metadata") or {}).get("namespace") == ns}
    spec = tenant.get("spec") or {}
    start = spec.get("priceBookPin")
    if not start:
        plan_name = (spec.get("planRef") or {}).get("name")
        plan = next((p for p in plans if _name(p) == plan_name and (p.get("metadata") or {}).get("namespace") == ns),
                    None)
        start = ((plan or {}).get("spec") or {}).get("priceBookRef")
        seen = set()
        while start and start not in seen:  # follow in-force successors ("follow Active")
            seen.add(start)
            nxt = next((n for n, b in local.items() if (b.get("spec") or {}).get("supersedes") == start and
                        (b.get("status") or {}).get("state") in ("Active", "Superseded", "Retired")), None)
            if nxt is None:
                break
            start = nxt
    book = local.get(str(start)) if start else None
    currency = ((book or {}).get("spec") or {}).get("currency")
    return str(currency) if currency else None


def micros(value: Any) -> int | None:
    """A decimal string as integer micro-units (`-1.5` -> -1500000), for chart geometry and comparisons: the
    digits are moved, not converted (None when it is not such a string)."""
    parts = _parts(value)
    if parts is None:
        return None
    sign, whole, frac = parts
    n = int(whole) * 1_000_000 + int(frac.ljust(6, "0"))
    return -n if sign else n


def from_micros(value: int) -> str:
    """Integer micro-units as a decimal string (`1500000` -> `1.500000`)."""
    sign = "-" if value < 0 else ""
    whole, frac = divmod(abs(value), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"
