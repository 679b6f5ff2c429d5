"""Reusable field types whose rules hold both in Python and in the API server.

Each rule is written once: a regular expression that means the same in Python ``re`` (ASCII mode) and in
RE2 (CEL ``matches``), checked by pydantic on parse and emitted as an ``x-kubernetes-validations`` rule with a
message that names the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from maasctl.api._base import KubeSchema, Rule, apply_extra

# Characters that would break a CEL string literal or an HTTP header value the builders interpolate a value
# into: both quotes, the backslash and every C0/C1 control character (Unicode category Cc).
UNSAFE_CHARS = r"[\x22\x27\x5c\x00-\x1f\x7f-\x9f]"
WINDOW_PATTERN = r"^[1-9]\d{0,3}(s|m|h)$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Absolute http(s) URL with a host and an optional path, no query, fragment, user info or whitespace.
ENDPOINT_PATTERN = r"^https?://[A-Za-z0-9.\-\[\]:]+(/[^\s?#\x22\x27\x5c]*)?$"
# A host name alone (the reference's ExternalModel form: an FQDN, port and TLS from annotations).
HOSTNAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
PROVIDER_ENDPOINT_PATTERN = f"({ENDPOINT_PATTERN})|({HOSTNAME_PATTERN})"

MAX_TOKEN_LIMIT = 1_000_000_000_000


def cel_string(text: str) -> str:
    """Quote ``text`` as a CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def has_unsafe_chars(value: str) -> bool:
    """True when ``value`` contains a character that must never be interpolated into CEL or a header."""
    return re.search(UNSAFE_CHARS, value) is not None


@dataclass(frozen=True)
class Matches:
    """The value must (or, with ``negate``, must not) match ``pattern``; enforced by pydantic and by CEL."""

    pattern: str
    message: str
    negate: bool = False

    def _check(self, value: str) -> str:
        found = re.search(self.pattern, value, flags=re.ASCII) is not None
        if found == self.negate:
            raise PydanticCustomError("maas_rule", self.message)
        return value

    def rule(self) -> Rule:
        expr = f"self.matches({cel_string(self.pattern)})"
        return Rule(rule=f"!{expr}" if self.negate else expr, message=self.message)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        apply_extra(out, {"x-kubernetes-validations": [self.rule().to_dict()]})
        return out


def safe(field: str) -> Matches:
    """Rule for a free-form value that ends up inside generated CEL predicates or header values."""
    return Matches(UNSAFE_CHARS, f"{field} must not contain quotes, backslashes or control characters", negate=True)


# A model name (MaaSModelRef, LLMInferenceService, ExternalModel): a DNS-1123 subdomain.
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
# A namespace name: a DNS-1123 label.
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]

SubscriptionUser = Annotated[str, Field(min_length=1, max_length=256), safe("owner.users")]
SubjectUser = Annotated[str, Field(min_length=1, max_length=256), safe("subjects.users")]
SubscriptionUsers = Annotated[list[SubscriptionUser], Field(max_length=1024), KubeSchema(list_type="set")]
SubjectUsers = Annotated[list[SubjectUser], Field(max_length=1024), KubeSchema(list_type="set")]
OrganizationId = Annotated[str, Field(min_length=1, max_length=253), safe("organizationId")]
CostCenter = Annotated[str, Field(min_length=1, max_length=256), safe("costCenter")]

Window = Annotated[
    str,
    Field(max_length=16),
    Matches(
        WINDOW_PATTERN,
        "window must be a number from 1 to 9999 followed by s, m or h (e.g. 30s, 1m, 24h); "
        "days and fractions are not accepted: use hours instead (e.g. 24h, not 1d)",
    ),
]
TokenLimit = Annotated[int, Field(ge=1, le=MAX_TOKEN_LIMIT), KubeSchema(fmt="int64")]

_URL_RULE = (
    " must be an absolute http(s) URL, with the API base path if any, and without query, fragment, quotes "
    "or whitespace (e.g. https://api.example.com/v1)"
)
Endpoint = Annotated[str, Field(max_length=2048), Matches(ENDPOINT_PATTERN, "endpoint" + _URL_RULE)]
ProviderEndpoint = Annotated[
    str,
    Field(min_length=1, max_length=2048),
    Matches(
        PROVIDER_ENDPOINT_PATTERN,
        "endpoint must be a host name (e.g. api.openai.com; port and TLS from the maas.opendatahub.io/port and "
        "maas.opendatahub.io/tls annotations) or an absolute http(s) URL with the API base path, without query, "
        "fragment, quotes or whitespace (e.g. https://api.example.com/v1)",
    ),
]
EndpointOverride = Annotated[str, Field(max_length=2048), Matches(ENDPOINT_PATTERN, "endpointOverride" + _URL_RULE)]

LABELS_RULE = KubeSchema(
    rules=(
        Rule(
            rule=f"self.all(k, k.size() <= 63 && !k.matches({cel_string(UNSAFE_CHARS)}))",
            message="labels keys must be at most 63 characters without quotes, backslashes or control characters",
        ),
    )
)


# A small string map whose keys and values end up in telemetry labels or headers.
MeteringLabels = Annotated[
    dict[str, Annotated[str, Field(max_length=256), safe("labels values")]],
    Field(max_length=32),
    LABELS_RULE,
]
