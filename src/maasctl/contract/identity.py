"""The identity the MaaS AuthPolicy exports, named once, and the `x-maas-identity` header that carries it.

Authorino's success response exports the `identity` filter (read as `auth.identity.<key>` by
TokenRateLimitPolicies and Plans, and by the data plane for the usage record); the key names below are that
filter's properties (builders/authpolicy.py writes them, builders/trlp.py and billing match on them, the gateway
and the payload processor read them). `SUBSCRIPTION_INFO` is the metadata evaluator holding maas-api's selection
answer (`auth.metadata.subscriptionInfo`), whose fields the record also needs.

`x-maas-identity` (server-decided: `contract.edge` refuses any client-sent `x-maas-*`) carries these to the
payload processor in a cluster: base64url (unpadded) of a JSON object `{"identity": {...}, "subscriptionInfo":
{...}}` with only the keys below, each a bounded string (groups: a bounded list of strings; labels: a bounded
map of strings). `decode_identity_header` refuses anything else (too long, not base64url, not that JSON),
so a forged or corrupted header is an error, never a partial identity.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "FILTER",
    "GROUPS",
    "GROUPS_STR",
    "HEADER",
    "IDENTITY_KEYS",
    "INFO_COST_CENTER",
    "INFO_LABELS",
    "INFO_ORGANIZATION",
    "KEY_ID",
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

HEADER: Final = "x-maas-identity"
MAX_HEADER_CHARS: Final = 16 * 1024
_MAX_TEXT: Final = 1024
_MAX_ITEMS: Final = 64

IDENTITY_KEYS: Final = (USERID, GROUPS, KEY_ID, SELECTED_SUBSCRIPTION, SELECTED_SUBSCRIPTION_NAMESPACE,
                        SELECTED_SUBSCRIPTION_KEY, ORGANIZATION_ID)
"""The identity keys the header carries (what the usage record and the processor's limits read)."""
_INFO_TEXT: Final = (INFO_ORGANIZATION, INFO_COST_CENTER)


class InvalidIdentityHeader(ValueError):
    """An `x-maas-identity` value that is not one this contract encodes."""


@dataclass(frozen=True)
class Carried:
    """What `x-maas-identity` carries: the identity filter's keys and the selection's record fields."""

    identity: Mapping[str, Any] = field(default_factory=dict)
    subscription_info: Mapping[str, Any] = field(default_factory=dict)


def subscription_of(identity: Mapping[str, Any]) -> str:
    """`<namespace>/<name>` of the selected subscription, or "" when none was selected."""
    name = identity.get(SELECTED_SUBSCRIPTION)
    return f"{identity.get(SELECTED_SUBSCRIPTION_NAMESPACE, '')}/{name}" if name else ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def encode_identity_header(identity: Mapping[str, Any], subscription_info: Mapping[str, Any]) -> str:
    """The header value for an admitted request (strings cut at the bounds `decode_identity_header` keeps)."""
    ident: dict[str, Any] = {}
    for key in IDENTITY_KEYS:
        if key not in identity:
            continue
        if key == GROUPS:
            groups = identity[key] if isinstance(identity[key], list | tuple) else []
            ident[key] = [_text(g)[:_MAX_TEXT] for g in groups[:_MAX_ITEMS]]
        else:
            ident[key] = _text(identity[key])[:_MAX_TEXT]
    info: dict[str, Any] = {k: _text(subscription_info[k])[:_MAX_TEXT] for k in _INFO_TEXT
                            if subscription_info.get(k) is not None}
    labels = subscription_info.get(INFO_LABELS)
    if isinstance(labels, Mapping):
        info[INFO_LABELS] = {_text(k)[:_MAX_TEXT]: _text(v)[:_MAX_TEXT]
                             for k, v in sorted(labels.items(), key=lambda kv: str(kv[0]))[:_MAX_ITEMS]}
    raw = json.dumps({FILTER: ident, SUBSCRIPTION_INFO: info}, separators=(",", ":"), ensure_ascii=False)
    value = base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode("ascii")
    if len(value) > MAX_HEADER_CHARS:
        raise InvalidIdentityHeader("the identity does not fit the header")
    return value


def _strings(value: Any, what: str) -> None:
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise InvalidIdentityHeader(f"{what} must be a string of at most {_MAX_TEXT} characters")


def decode_identity_header(value: str) -> Carried:
    """Read a header `encode_identity_header` wrote; InvalidIdentityHeader for anything else."""
    if not value or len(value) > MAX_HEADER_CHARS:
        raise InvalidIdentityHeader("empty or too long")
    if value.strip("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"):
        raise InvalidIdentityHeader("not base64url")
    try:
        data = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidIdentityHeader("not base64url JSON") from exc
    if not isinstance(data, dict) or set(data) - {FILTER, SUBSCRIPTION_INFO}:
        raise InvalidIdentityHeader("not an identity object")
    ident, info = data.get(FILTER, {}), data.get(SUBSCRIPTION_INFO, {})
    if not isinstance(ident, dict) or not isinstance(info, dict):
        raise InvalidIdentityHeader("identity and subscriptionInfo must be objects")
    if set(ident) - set(IDENTITY_KEYS) or set(info) - {*_INFO_TEXT, INFO_LABELS}:
        raise InvalidIdentityHeader("unknown keys")
    for key, item in ident.items():
        if key == GROUPS:
            if not isinstance(item, list) or len(item) > _MAX_ITEMS:
                raise InvalidIdentityHeader(f"groups must be a list of at most {_MAX_ITEMS}")
            for group in item:
                _strings(group, "a group")
        else:
            _strings(item, key)
    for key in _INFO_TEXT:
        if key in info:
            _strings(info[key], key)
    labels = info.get(INFO_LABELS, {})
    if not isinstance(labels, dict) or len(labels) > _MAX_ITEMS:
        raise InvalidIdentityHeader(f"labels must be a map of at most {_MAX_ITEMS}")
    for k, v in labels.items():
        _strings(k, "a label name")
        _strings(v, "a label value")
    return Carried(ident, info)
