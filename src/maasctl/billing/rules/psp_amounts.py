"""Money at a payment service provider: integer minor units of the currency (Stripe's `amount`).

The ledger keeps six decimal places; a PSP charges whole cents (or whole yen). An amount is sent to the PSP only
when it is exactly representable (`to_minor` refuses otherwise: a reload of "10.005" USD is a configuration
error, never silently rounded); usage pushed for invoicing is rounded *down* to the minor unit and the rest
carried to the next push (`split_minor`), so nothing is ever charged twice or lost.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from maasctl.billing import money

__all__ = ["MINOR_DIGITS", "from_minor", "split_minor", "to_minor"]

# ISO 4217 exponents of the seed's currencies (PriceBook.currency enum).
MINOR_DIGITS: Final = {"USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "CAD": 2, "AUD": 2, "CHF": 2}


def _digits(currency: str) -> int:
    try:
        return MINOR_DIGITS[currency.upper()]
    except KeyError:
        raise ValueError(f"unsupported currency {currency!r}") from None


def to_minor(amount: Decimal, currency: str) -> int:
    """`amount` in minor units; ValueError when it is negative or not a whole number of them."""
    if amount < 0:
        raise ValueError("a PSP amount is never negative")
    scaled = amount.scaleb(_digits(currency), context=money.CONTEXT)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{amount} {currency.upper()} is not a whole number of minor units "
                         f"({_digits(currency)} decimal places)")
    return int(scaled)


def from_minor(minor: int, currency: str) -> Decimal:
    """Minor units back to a ledger amount (six places)."""
    return money.quantize(Decimal(minor).scaleb(-_digits(currency), context=money.CONTEXT))


def split_minor(amount: Decimal, currency: str) -> tuple[int, Decimal]:
    """(whole minor units in `amount`, rounded down; the remainder to carry), for amounts >= 0."""
    if amount <= 0:
        return 0, amount
    scaled = amount.scaleb(_digits(currency), context=money.CONTEXT)
    whole = int(scaled.to_integral_value(rounding="ROUND_FLOOR"))
    return whole, money.CONTEXT.subtract(amount, from_minor(whole, currency))
