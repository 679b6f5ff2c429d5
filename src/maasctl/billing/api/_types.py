"""Field types shared by the billing kinds: money, references, names and times.

Money fields are `decimal.Decimal` in Python and decimal strings on the wire. The API server checks the
pattern with a CEL rule whose message names the field, so a person sees *which* amount is wrong and what
one looks like; pydantic applies the same pattern (through `money.parse`) when the controller reads them.
Pattern and `maxLength` both come from `money`, so admission refuses every amount the controller could not
evaluate (more than `money.MAX_DIGITS` digits included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from maasctl.api._base import CamelModel, KubeSchema, Rule, apply_extra
from maasctl.api._fields import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, cel_string
from maasctl.billing import money

__all__ = [
    "DURATION_PATTERN",
    "GEO_PATTERN",
    "KeysMatch",
    "LocalObjectReference",
    "MoneyField",
    "NonNegativeInt64",
    "ObjectName",
    "PositiveInt64",
    "Time",
]

GEO_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DURATION_PATTERN = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
_PCT_AT_MOST_100 = r"^(100(\.0{1,6})?|\d{1,2}(\.\d{1,6})?)$"


@dataclass(frozen=True)
class MoneyField:
    """A decimal-string amount: `Decimal` in Python, a string matching `money.MONEY_PATTERN` on the wire.

    `field` names the field in the admission message; `signed` admits a leading minus (balances may be
    below zero in grace); `at_most_100` also caps a percentage.
    """

    field: str
    signed: bool = False
    at_most_100: bool = False

    @property
    def pattern(self) -> str:
        if self.at_most_100:
            return _PCT_AT_MOST_100
        return money.SIGNED_PATTERN if self.signed else money.MONEY_PATTERN

    @property
    def max_length(self) -> int:
        return money.SIGNED_MAX_LENGTH if self.signed else money.MAX_LENGTH

    def message(self) -> str:
        what = "a percentage from 0 to 100" if self.at_most_100 else "an amount"
        sign = "an optional minus sign, " if self.signed else ""
        return (f"{self.field} must be {what} written as a decimal string: {sign}1 to {money.MAX_DIGITS} digits, "
                f"optionally a dot and 1 to {money.PLACES} decimals (e.g. \"2.50\"); no exponent, no float")

    def _parse(self, value: Any) -> Decimal:
        try:
            amount = money.parse_signed(value) if self.signed else money.parse(value)
        except money.MoneyError as exc:
            raise PydanticCustomError("billing_money", "{field}: {error}",
                                      {"field": self.field, "error": str(exc)}) from exc
        if self.at_most_100 and amount > 100:
            raise PydanticCustomError("billing_money", self.message())
        return amount

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self._parse,
            serialization=core_schema.plain_serializer_function_ser_schema(_wire, when_used="always"),
        )

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        rule = Rule(rule=f"self.matches({cel_string(self.pattern)})", message=self.message())
        return {"type": "string", "maxLength": self.max_length, "x-kubernetes-validations": [rule.to_dict()]}


def _wire(amount: Decimal) -> str:
    return format(amount, "f")


ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
LabelName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
Time = datetime
"""metav1.Time: an RFC 3339 timestamp (`format: date-time`)."""


class LocalObjectReference(CamelModel):
    """An object in the same namespace, by name."""

    name: ObjectName = Field(description="Name of the object, in the same namespace.")


@dataclass(frozen=True)
class KeysMatch:
    """Every key of a map must match `pattern` (max `max_length` chars); checked by pydantic and by CEL.

    OpenAPI's `patternProperties` is not allowed in a structural schema, hence a CEL rule on the map.
    """

    pattern: str
    max_length: int
    message: str

    def _check(self, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if len(key) > self.max_length or not re.fullmatch(self.pattern.strip("^$"), key, flags=re.ASCII):
                raise PydanticCustomError("billing_keys", self.message)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        rule = Rule(
            rule=f"self.all(k, k.size() <= {self.max_length} && k.matches({cel_string(self.pattern)}))",
            message=self.message,
        )
        apply_extra(out, {"x-kubernetes-validations": [rule.to_dict()]})
        return out


def _int64(value: int) -> int:
    if value >= 2**63:
        raise ValueError("value does not fit in a signed 64-bit integer")
    return value


# The bound is checked in Python only: the API server reads schema bounds as float64 (see api._base.Int64).
NonNegativeInt64 = Annotated[int, Field(ge=0), AfterValidator(_int64), KubeSchema(fmt="int64")]
PositiveInt64 = Annotated[int, Field(ge=1), AfterValidator(_int64), KubeSchema(fmt="int64")]
