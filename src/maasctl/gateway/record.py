"""The usage record of a served request, fitted to `UsageRecord`'s bounds.

A served request is billed only through its record, and maas-api refuses a record out of UsageRecord's bounds:
so whatever the identity or the subscription hold (a 339-character ServiceAccount name is valid Kubernetes),
every value is fitted to those bounds before the record is built, and nothing is ever dropped.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import ValidationError

from maasctl.contract.usage import UsageRecord

__all__ = ["BOUNDS", "fit_record_values", "fit_text", "usage_record"]

log = logging.getLogger("maasctl.gateway")


_DIGEST_CHARS = 16
"""Hex digits of the SHA-256 that ends a fitted value: 64 bits, so two different values never become one."""
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
"""Control characters (NUL: PostgreSQL text cannot hold it) and lone surrogates (not UTF-8: pydantic refuses)."""
_CHARGE = frozenset({"request_id", "timestamp", "status", "input_tokens", "cached_tokens", "output_tokens",
                     "reasoning_tokens", "total_tokens", "charged_tokens", "estimated"})
"""Fields the last-resort record keeps whatever happens: what identifies the request and what it costs."""


def _max_length(constraints: tuple[Any, ...] | list[Any]) -> int | None:
    """The `max_length` among pydantic / annotated-types constraints (None: unbounded)."""
    for item in constraints:
        limit = getattr(item, "max_length", None)
        if isinstance(limit, int):
            return limit
    return None


def _range(constraints: list[Any]) -> tuple[float, float] | None:
    """The (ge, le) of a numeric field's constraints, None unless it has an upper bound."""
    low = next((c.ge for c in constraints if hasattr(c, "ge")), float("-inf"))
    high = next((c.le for c in constraints if hasattr(c, "le")), None)
    return None if high is None else (low, high)


@dataclass(frozen=True)
class _RecordBounds:
    """UsageRecord's limits, read from its field definitions (so they cannot drift from what maas-api checks)."""

    strings: dict[str, int]  # field -> max_length (fields with a pattern, like request_id, excluded)
    numbers: dict[str, tuple[float, float]]  # field -> (ge, le)
    labels: int
    label_key: int
    label_value: int


def _record_bounds() -> _RecordBounds:
    fields = UsageRecord.model_fields
    strings: dict[str, int] = {}
    numbers: dict[str, tuple[float, float]] = {}
    for name, info in fields.items():
        limit = _max_length(info.metadata)
        bounds = _range(info.metadata)
        if info.annotation is str and limit is not None and not any(getattr(c, "pattern", None)
                                                                    for c in info.metadata):
            strings[name] = limit
        elif bounds is not None:
            numbers[name] = bounds
    key_type, value_type = get_args(fields["labels"].annotation)
    return _RecordBounds(strings, numbers, _max_length(fields["labels"].metadata) or 0,
                         _max_length(get_args(key_type)[1:]) or 0, _max_length(get_args(value_type)[1:]) or 0)


BOUNDS = _record_bounds()


def fit_text(value: str, limit: int) -> str:
    """`value` if it fits `limit` characters and is storable; else its storable prefix, `~` and a hash of the
    whole value: still recognisable, within the bound, and distinct for every distinct value."""
    if len(value) <= limit and _UNSTORABLE.search(value) is None:  # the usual case: nothing to change
        return value
    clean = _UNSTORABLE.sub("\ufffd", value)
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    return f"{clean[:max(0, limit - _DIGEST_CHARS - 1)]}~{digest}"[-limit:]


def _fit_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Each label fitted; beyond the bound, those with the greatest keys are dropped (the same ones every time)."""
    fitted = {fit_text(k, BOUNDS.label_key): fit_text(v, BOUNDS.label_value) for k, v in labels.items()}
    return fitted if len(fitted) <= BOUNDS.labels else dict(sorted(fitted.items())[:BOUNDS.labels])


def _fit_number(value: Any, bounds: tuple[float, float]) -> Any:
    """A number clamped into its field's range (a strict int stays an int); anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    low, high = bounds
    if low <= value <= high:  # the usual case (min/max would give `value` back)
        return value
    return min(max(value, int(low) if isinstance(value, int) else low), int(high) if isinstance(value, int) else high)


def fit_record_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` of a UsageRecord fitted to its bounds: strings (hashed when cut), labels, numbers."""
    strings, numbers = BOUNDS.strings, BOUNDS.numbers
    out = dict(values)
    for name, value in values.items():
        limit = strings.get(name)
        if limit is not None:
            if isinstance(value, str):
                out[name] = fit_text(value, limit)
        elif name in numbers:
            out[name] = _fit_number(value, numbers[name])
    labels = values.get("labels")
    if isinstance(labels, Mapping):
        out["labels"] = _fit_labels(labels) if labels else {}
    return out


def usage_record(values: Mapping[str, Any]) -> UsageRecord:
    """The record of a served request, always (a request without one is never billed): fitted to the record's
    bounds; should a field still be refused, the record goes out without it, the charge intact."""
    fitted = fit_record_values(values)
    try:
        return UsageRecord(**fitted)
    except ValidationError as exc:
        refused = {str(err["loc"][0]) for err in exc.errors() if err["loc"]} - _CHARGE
        log.error("usage record of %s emitted without %s: %s", values.get("request_id"), ", ".join(sorted(refused)),
                  exc.errors()[0].get("msg"))
        return UsageRecord(**{k: v for k, v in fitted.items() if k not in refused})
