"""Money as `decimal.Decimal`, written as decimal strings, never as a float.

The wire format of every amount is `MONEY_PATTERN`: a non-negative decimal string of at most `MAX_DIGITS`
digits, optionally a dot and 1 to `PLACES` decimals, nothing else (no sign, exponent, space, newline or
non-ASCII digit). The CRDs are generated from the same pattern and `MAX_LENGTH` (billing.api._types), so the
API server admits exactly what the code can evaluate. `parse` (and `parse_signed`) are the only way in,
`fmt` the only way out, and `quantize` the one rounding rule (half-even to 6 places, the ledger's
precision), so the rating, the ledger, the webhooks and the CRDs can never disagree about an amount.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal
from typing import Final

__all__ = [
    "CONTEXT",
    "MAX_DIGITS",
    "MAX_LENGTH",
    "MONEY_PATTERN",
    "PLACES",
    "SIGNED_MAX_LENGTH",
    "SIGNED_PATTERN",
    "MoneyError",
    "fmt",
    "is_money",
    "parse",
    "parse_signed",
    "quantize",
]

PLACES: Final = 6
MAX_DIGITS: Final = 24
"""Digits before the dot that an amount may have (NUMERIC(30,6) in SQL holds them)."""
MONEY_PATTERN: Final = rf"^[0-9]{{1,{MAX_DIGITS}}}(\.[0-9]{{1,{PLACES}}})?$"
"""The whole string must match: `^`/`$` are anchors for the API server's RE2; Python uses `fullmatch`."""
SIGNED_PATTERN: Final = "^-?" + MONEY_PATTERN[1:]
MAX_LENGTH: Final = MAX_DIGITS + 1 + PLACES
"""The longest amount (the CRDs' `maxLength`): every digit, the dot and every decimal."""
SIGNED_MAX_LENGTH: Final = MAX_LENGTH + 1

_QUANTUM: Final = Decimal(1).scaleb(-PLACES)
# `fullmatch`, never `match` with `$`: Python's `$` also matches before a final "\n" ("200.00\n").
_PATTERN: Final = re.compile(MONEY_PATTERN.removeprefix("^").removesuffix("$"), re.ASCII)

CONTEXT: Final = decimal.Context(prec=MAX_DIGITS + PLACES + 8, rounding=decimal.ROUND_HALF_EVEN,
                                 traps=[decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero])
"""Arithmetic on amounts uses this context: enough digits that sums of amounts are exact."""


class MoneyError(ValueError):
    """A value that is not a decimal money string."""


def is_money(text: object) -> bool:
    """True when `text` is a string that is, as a whole, an amount of at most `MAX_DIGITS` digits."""
    return isinstance(text, str) and len(text) <= MAX_LENGTH and _PATTERN.fullmatch(text) is not None


def parse(value: object) -> Decimal:
    """The amount written as `value` (a money string or a Decimal already in range).

    Raises:
        MoneyError: a float, an int, a negative, NaN/infinity, an exponent, more than 6 decimals, more than
            `MAX_DIGITS` digits, or anything around the digits (spaces, a newline, a sign).
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
        raise MoneyError(f"{value[:MAX_LENGTH + 8]!r} is not a decimal string of at most {MAX_DIGITS} digits and "
                         f"{PLACES} decimals (e.g. \"2.50\")")
    return Decimal(value)


def parse_signed(value: object) -> Decimal:
    """Like `parse`, but a leading minus is allowed (balances and adjustments may be below zero)."""
    if isinstance(value, str) and value.startswith("-"):
        return -parse(value[1:])
    if isinstance(value, Decimal) and value.is_finite() and value.is_signed():
        return -parse(-value)
    return parse(value)


def quantize(amount: Decimal) -> Decimal:
    """`amount` rounded half-even to 6 places: the one rounding rule of billing."""
    return amount.quantize(_QUANTUM, context=CONTEXT)


def fmt(amount: Decimal) -> str:
    """The wire form of `amount` as written (trailing zeros kept, never an exponent)."""
    return format(parse(amount), "f")
