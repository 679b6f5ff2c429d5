"""A credit as the tenant portal API takes it (`contract.billing_portal`, "Credits"): its JSON body read strictly,
as a pure function, so every odd input is refused here with the field it concerns and never reaches the ledger.

Strict on purpose: a JSON object of exactly `id`, `amount` and `reason`, each a string (a JSON number is refused,
not converted: 0.1 has no exact binary value, 1e3 is not how money is written); a key given twice, NaN or
Infinity, bytes that are not UTF-8, or nesting the decoder cannot follow are not JSON this API reads. The amount
is a money string (`money.parse`: ASCII digits, at most 6 decimals, no sign, exponent, space or other script's
digits) above zero and at most `MAX_CREDIT`; the reason one line of visible text.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from maasctl.billing import money
from maasctl.contract.billing_portal import CREDIT_ID, MAX_CREDIT, MAX_CREDIT_REASON

__all__ = ["CreditError", "CreditRequest", "parse_credit"]

FIELDS: Final = ("id", "amount", "reason")
_MAX: Final = Decimal(MAX_CREDIT)
_NOT_ONE_LINE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})  # controls, format, separators


@dataclass(frozen=True)
class CreditRequest:
    id: str
    amount: Decimal
    reason: str


class CreditError(ValueError):
    """Why a credit's body is refused, and the field it concerns (`body` for the whole of it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise CreditError(key if key in FIELDS else "body", f"{key[:40]!r} is given twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise CreditError("body", f"{name} is not a JSON value this API reads")


def _load(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, CreditError):
            raise
        raise CreditError("body", 'the body is a JSON object {"id": ..., "amount": "25.00", "reason": ...}') from None
    if not isinstance(body, dict):
        raise CreditError("body", 'the body is a JSON object {"id": ..., "amount": "25.00", "reason": ...}')
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise CreditError("body", f"unknown field {unknown[0][:40]!r}: a credit has id, amount and reason only")
    for name in FIELDS:
        if name not in body:
            raise CreditError(name, f"{name} is required")
        if not isinstance(body[name], str):
            raise CreditError(name, f"{name} is a string, not {type(body[name]).__name__}")
    return body


def _amount(text: str) -> Decimal:
    try:
        amount = money.parse(text)
    except money.MoneyError:
        raise CreditError("amount", f'amount is a decimal string such as "25.00" (digits, at most {money.PLACES} '
                                    "decimals, no sign, exponent or space)") from None
    if amount <= 0:
        raise CreditError("amount", "amount is above zero")
    if amount > _MAX:
        raise CreditError("amount", f"amount is at most {MAX_CREDIT} (larger credits: maasctl billing ledger credit)")
    return amount


def _reason(text: str) -> str:
    if not text.strip() or len(text) > MAX_CREDIT_REASON or any(
            unicodedata.category(c) in _NOT_ONE_LINE for c in text):
        raise CreditError("reason", f"reason is one line of 1 to {MAX_CREDIT_REASON} characters (why: kept in the "
                                    "ledger)")
    return text


def parse_credit(raw: bytes) -> CreditRequest:
    """The credit `raw` (the request's body) asks for. Raises CreditError naming the field it refuses."""
    body = _load(raw)
    if CREDIT_ID.match(body["id"]) is None:
        raise CreditError("id", "id is 16 to 64 of A-Z, a-z, 0-9, _ and - (the client's idempotency id)")
    return CreditRequest(body["id"], _amount(body["amount"]), _reason(body["reason"]))
