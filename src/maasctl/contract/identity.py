"""The identity the MaaS AuthPolicy exports, named once, and the `x-maas-identity` header that carries it.

Authorino's success response exports the `identity` filter (read as `auth.identity.<key>` by
TokenRateLimitPolicies and Plans, and by the data plane for the usage record); the key names below are that
filter's properties (builders/authpolicy.py writes them, builders/trlp.py and billing match on them, the gateway
and the payload processor read them). `SUBSCRIPTION_INFO` is the metadata evaluator holding maas-api's selection
answer (`auth.metadata.subscriptionInfo`), whose fields the record also needs.

`x-maas-identity` (server-decided: `contract.edge` refuses any client-sent `x-maas-*`) carries to the payload
processor what its stages read, so that it evaluates the same predicates as Authorino and Limitador: the JSON
object `{"identity": {...}, "filters": {...}, "subscriptionInfo": {...}}` - the identity filter whole, the
AuthPolicy's other exported success filters (`guardrails` when the request is guarded, `billing` with the tenant
and the API key's labels that a Plan's limits read), and the selection's record fields. It is a `json` success
header of the generated AuthPolicy (builders/authpolicy.py), so Authorino writes it: plain JSON, UTF-8. Every
value is bounded (strings of at most 1,024 characters, lists and maps of at most 64 entries and groups of at most
256, at most 6 levels deep, finite numbers, 32 KiB in all); the identity keys below keep their types (strings;
groups: a list of strings). `decode_identity_header` refuses anything else (too long, not that JSON, a bound
exceeded, no `filters`), so a forged or corrupted header is an error, never a partial identity or an unguarded
request. The header never goes upstream (`contract.edge.upstream_headers`, the processor's mutation, and the
ExternalModel route's header removal).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BILLING",
    "BILLING_KEY_LABELS",
    "BILLING_TENANT",
    "FILTER",
    "FILTERS",
    "GROUPS",
    "GROUPS_STR",
    "HEADER",
    "IDENTITY_KEYS",
    "INFO_COST_CENTER",
    "INFO_LABELS",
    "INFO_ORGANIZATION",
    "KEY_ID",
    "MAX_DEPTH",
    "MAX_GROUPS",
    "MAX_HEADER_CHARS",
    "ORGANIZATION_ID",
    "SELECTED_SUBSCRIPTION",
    "SELECTED_SUBSCRIPTION_KEY",
    "SELECTED_SUBSCRIPTION_NAMESPACE",
    "SUBSCRIPTION_INFO",
    "SUBSCRIPTION_INFO_KEY",
    "USERID",
    "Carried",
    "InvalidIdentityHeader",
    "decode_identity_header",
    "encode_identity_header",
    "subscription_of",
]

FILTER: Final = "identity"
"""The AuthPolicy's success filter (`auth.identity.*`)."""
USERID: Final = "userid"
GROUPS: Final = "groups"
GROUPS_STR: Final = "groups_str"
KEY_ID: Final = "keyId"
SELECTED_SUBSCRIPTION: Final = "selected_subscription"
SELECTED_SUBSCRIPTION_NAMESPACE: Final = "selected_subscription_namespace"
SELECTED_SUBSCRIPTION_KEY: Final = "selected_subscription_key"
"""`<sub ns>/<sub>@<model ns>/<model>`: what TokenRateLimitPolicies match (contract.selection)."""
ORGANIZATION_ID: Final = "organization_id"
SUBSCRIPTION_INFO_KEY: Final = "subscription_info"

SUBSCRIPTION_INFO: Final = "subscriptionInfo"
"""The metadata evaluator with maas-api's subscription selection (`auth.metadata.subscriptionInfo`)."""
INFO_ORGANIZATION: Final = "organizationId"
INFO_COST_CENTER: Final = "costCenter"
INFO_LABELS: Final = "labels"

BILLING: Final = "billing"
"""The success filter a billing Plan's AuthPolicy exports (`auth.billing.*`, billing.rules.identity)."""
BILLING_TENANT: Final = "tenant"
BILLING_KEY_LABELS: Final = "keyLabels"

HEADER: Final = "x-maas-identity"
FILTERS: Final = "filters"
"""The header's map of the AuthPolicy's exported success filters other than `identity` (by filter name)."""
MAX_HEADER_CHARS: Final = 32 * 1024
MAX_DEPTH: Final = 6
_MAX_TEXT: Final = 1024
_MAX_ITEMS: Final = 64
MAX_GROUPS: Final = 256
_GROUPS_STR_CHARS: Final = MAX_GROUPS * (_MAX_TEXT + 1)
_MAX_FILTERS: Final = 16
_MAX_NUMBER: Final = 2**53  # what every JSON reader keeps exactly
_FILTER_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,62}")

IDENTITY_KEYS: Final = (USERID, GROUPS, KEY_ID, SELECTED_SUBSCRIPTION, SELECTED_SUBSCRIPTION_NAMESPACE,
                        SELECTED_SUBSCRIPTION_KEY, ORGANIZATION_ID)
"""The identity keys with a fixed type (what the usage record and the limits' counters read)."""
_INFO_TEXT: Final = (INFO_ORGANIZATION, INFO_COST_CENTER)


class InvalidIdentityHeader(ValueError):
    """An `x-maas-identity` value that is not one this contract encodes."""


@dataclass(frozen=True)
class Carried:
    """What `x-maas-identity` carries: the identity filter, the other exported filters and the selection's
    record fields."""

    identity: Mapping[str, Any] = field(default_factory=dict)
    subscription_info: Mapping[str, Any] = field(default_factory=dict)
    filters: Mapping[str, Any] = field(default_factory=dict)


def subscription_of(identity: Mapping[str, Any]) -> str:
    """`<namespace>/<name>` of the selected subscription, or "" when none was selected."""
    name = identity.get(SELECTED_SUBSCRIPTION)
    return f"{identity.get(SELECTED_SUBSCRIPTION_NAMESPACE, '')}/{name}" if name else ""


def _text(value: Any) -> str:
    return (value if isinstance(value, str) else "" if value is None else str(value))[:_MAX_TEXT]


def _fit(value: Any, depth: int = 1) -> Any:
    """`value` within the bounds the decoder keeps: strings and containers cut, a container past the depth
    and a non-finite number dropped (None), anything that is not JSON written as text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _MAX_NUMBER else _text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if isinstance(value, Mapping | list | tuple) and depth > MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        return {_text(k): _fit(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    if isinstance(value, list | tuple):
        return [_fit(v, depth + 1) for v in value[:_MAX_ITEMS]]
    return _text(value)


def _fit_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in list(identity.items())[:_MAX_ITEMS]:
        if key == GROUPS:
            out[key] = [_text(g) for g in (item if isinstance(item, list | tuple) else [])[:MAX_GROUPS]]
        elif key == GROUPS_STR:
            out[key] = (item if isinstance(item, str) else "")[:_GROUPS_STR_CHARS]
        elif key in IDENTITY_KEYS:
            out[key] = _text(item)
        else:
            out[_text(key)] = _fit(item, 2)
    return out


def encode_identity_header(identity: Mapping[str, Any], subscription_info: Mapping[str, Any],
                           filters: Mapping[str, Any] | None = None) -> str:
    """The header value Authorino writes for an admitted request (for tests and tools; in the data plane the
    AuthPolicy renders it): the identity filter, the other exported `filters` (by name; `identity` among them is
    ignored) and the selection's record fields, cut at the bounds the decoder keeps. InvalidIdentityHeader when
    the whole does not fit the header, or a filter name is not one."""
    info: dict[str, Any] = {k: _text(subscription_info[k]) for k in _INFO_TEXT
                            if subscription_info.get(k) is not None}
    labels = subscription_info.get(INFO_LABELS)
    if isinstance(labels, Mapping):
        info[INFO_LABELS] = {_text(k): _text(v)
                             for k, v in sorted(labels.items(), key=lambda kv: str(kv[0]))[:_MAX_ITEMS]}
    others = {name: value for name, value in (filters or {}).items() if name != FILTER}
    if len(others) > _MAX_FILTERS or not all(_FILTER_NAME.fullmatch(str(name)) for name in others):
        raise InvalidIdentityHeader("the filters are not ones the header carries")
    data = {FILTER: _fit_identity(identity), FILTERS: {str(n): _fit(v) for n, v in others.items()},
            SUBSCRIPTION_INFO: info}
    value = json.dumps(data, separators=(",", ":"), allow_nan=False)
    if len(value) > MAX_HEADER_CHARS:
        raise InvalidIdentityHeader("the identity does not fit the header")
    return value


def _string(value: Any, what: str) -> None:
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise InvalidIdentityHeader(f"{what} must be a string of at most {_MAX_TEXT} characters")


def _bounded(value: Any, what: str, depth: int = 1) -> None:
    """Refuse a value `_fit` never writes."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float):
        if not math.isfinite(value):  # 1e999 parses as infinity
            raise InvalidIdentityHeader(f"{what}: a number out of range")
        return
    if isinstance(value, int):
        if abs(value) > _MAX_NUMBER:
            raise InvalidIdentityHeader(f"{what}: a number out of range")
        return
    if isinstance(value, str):
        _string(value, what)
        return
    if depth > MAX_DEPTH or len(value) > _MAX_ITEMS:
        raise InvalidIdentityHeader(f"{what}: nested deeper than {MAX_DEPTH} or more than {_MAX_ITEMS} entries")
    if isinstance(value, dict):
        for key, item in value.items():
            _string(key, f"a key of {what}")
            _bounded(item, what, depth + 1)
    else:
        for item in value:
            _bounded(item, what, depth + 1)


def _refuse_constant(name: str) -> Any:
    raise InvalidIdentityHeader(f"{name} is not a JSON number")


def _utf8(value: str) -> str:
    """A header value as text: Envoy carries bytes, which the fronts read as latin-1; Authorino writes UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeEncodeError:  # already text beyond latin-1
        return value
    except UnicodeDecodeError as exc:
        raise InvalidIdentityHeader("not UTF-8") from exc


def decode_identity_header(value: str) -> Carried:
    """Read a header the AuthPolicy (or `encode_identity_header`) wrote; InvalidIdentityHeader for anything else."""
    if not value or len(value) > MAX_HEADER_CHARS:
        raise InvalidIdentityHeader("empty or too long")
    try:
        data = json.loads(_utf8(value), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, InvalidIdentityHeader):
            raise
        raise InvalidIdentityHeader("not JSON") from exc
    if not isinstance(data, dict) or set(data) != {FILTER, FILTERS, SUBSCRIPTION_INFO}:
        raise InvalidIdentityHeader("not an identity object")
    ident, filters, info = data[FILTER], data[FILTERS], data[SUBSCRIPTION_INFO]
    if not isinstance(ident, dict) or not isinstance(filters, dict) or not isinstance(info, dict):
        raise InvalidIdentityHeader("identity, filters and subscriptionInfo must be objects")
    _identity(ident)
    if len(filters) > _MAX_FILTERS or any(name == FILTER or not _FILTER_NAME.fullmatch(name) for name in filters):
        raise InvalidIdentityHeader("filters: not filter names")
    for name, item in filters.items():
        _bounded(item, name)
    _subscription_info(info)
    return Carried(ident, info, filters)


def _identity(ident: dict[str, Any]) -> None:
    if len(ident) > _MAX_ITEMS:
        raise InvalidIdentityHeader(f"identity: more than {_MAX_ITEMS} keys")
    for key, item in ident.items():
        if key == GROUPS:
            if not isinstance(item, list) or len(item) > MAX_GROUPS:
                raise InvalidIdentityHeader(f"groups must be a list of at most {MAX_GROUPS}")
            for group in item:
                _string(group, "a group")
        elif key == GROUPS_STR:  # the groups joined with ","
            if not isinstance(item, str) or len(item) > _GROUPS_STR_CHARS:
                raise InvalidIdentityHeader(f"{GROUPS_STR} must be a string of at most {_GROUPS_STR_CHARS} characters")
        elif key in IDENTITY_KEYS:
            _string(item, key)
        else:
            _string(key, "an identity key")
            _bounded(item, key, 2)


def _subscription_info(info: dict[str, Any]) -> None:
    if set(info) - {*_INFO_TEXT, INFO_LABELS}:
        raise InvalidIdentityHeader("subscriptionInfo: unknown keys")
    for key in _INFO_TEXT:
        if key in info:
            _string(info[key], key)
    labels = info.get(INFO_LABELS, {})
    if not isinstance(labels, dict) or len(labels) > _MAX_ITEMS:
        raise InvalidIdentityHeader(f"labels must be a map of at most {_MAX_ITEMS}")
    for k, v in labels.items():
        _string(k, "a label name")
        _string(v, "a label value")
