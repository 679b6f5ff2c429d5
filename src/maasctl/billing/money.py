"""Money as `decimal.Decimal`, written as decimal strings, never as a float.

The wire format of every amount is the seed's pattern `^\\d+(\\.\\d{1,6})?$`: a non-negative decimal string
with at most six decimal places. `parse` is the only way in (it refuses floats, exponents, signs and
spaces), `fmt` the only way out, and `quantize` the one rounding rule (half-even to 6 places, the ledger's
precision), so the rating, the ledger and the CRDs can never disagree about an amount.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal
from typing import Final

__all__ = [
    "CONTEXT",
    "MONEY_PATTERN",
    "PLACES",
    "MoneyError",
    "fmt",
    "is_money",
    "parse",
    "quantize",
]

MONEY_PATTERN: Final = r"^\d+(\.\d{1,6})?$"
PLACES: Final = 6
MAX_DIGITS: Final = 24
"""Digits before the dot that an amount may have (NUMERIC(30,6) in SQL holds them)."""

_QUANTUM: Final = Decimal(1).scaleb(-PLACES)
_PATTERN: Final = re.compile(MONEY_PATTERN, re.ASCII)

CONTEXT: Final = decimal.Context(prec=MAX_DIGITS + PLACES + 8, rounding=decimal.ROUND_HALF_EVEN,
                                 traps=[decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero])
"""Arithmetic on amounts uses this context: enough digits that sums of amounts are exact."""


class MoneyError(ValueError):
    """A value that is not a decimal money string."""


def is_money(text: str) -> bool:
    """True when `text` matches the money pattern (and is not absurdly long)."""
    return bool(_PATTERN.match(text)) and len(text.split(".", 1)[0]) <= MAX_DIGITS


def parse(value: object) -> Decimal:
    """The amount written as `value` (a money string or a Decimal already in range).

    Raises:
        MoneyError: a float, an int, a negative, NaN/infinity, an exponent or more than 6 decimals.
    """
    if isinstance(value, Decimal):
        if not value.is_finite() or value.is_signed():
            raise MoneyError(f"{value!r} is not a non-negative finite amount")
        text = format(value, "f")
        if not is_money(text):
            raise MoneyError(f"{text} has more than {PLACES} decimal places or too many digits")
        return value
    if not isinstance(value, str):
        raise MoneyError(f"amounts are decimal strings such as \"2.50\", not {type(value).__name__}")
    if not is_money(value):
        raise MoneyError(f"{value!r} is not a decimal string with at most {PLACES} decimals (e.g. \"2.50\")")
    return Decimal(value)


def quantize(amount: Decimal) -> Decimal:
    """`amount` rounded half-even to 6 places: the one rounding rule of billing."""
    return amount.quantize(_QUANTUM, context=CONTEXT)


def fmt(amount: Decimal) -> str:
    """The wire form of `amount` as written (trailing zeros kept, never an exponent)."""
    return format(parse(amount), "f")
