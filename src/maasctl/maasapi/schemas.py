"""Request and response bodies. Requests forbid unknown fields; JSON uses camelCase like the upstream API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$"
SUBSCRIPTION_PATTERN = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"

LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=253)]
SubscriptionName = Annotated[str, StringConstraints(pattern=SUBSCRIPTION_PATTERN, max_length=317)]
KeyStatus = Literal["active", "revoked", "expired"]


def _max_labels(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 50:
        raise ValueError("at most 50 labels")
    return value


Labels = Annotated[dict[LabelKey, LabelValue], AfterValidator(_max_labels)]


class Request(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, str_strip_whitespace=False
    )


class Response(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class MintRequest(Request):
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    description: Annotated[str, StringConstraints(max_length=1024)] = ""
    subscription: SubscriptionName | None = None
    expires_in: Annotated[str, StringConstraints(max_length=16)] | None = Field(
        default=None, description="Lifetime such as '30d', '12h', '90m' (bounded by the configured maximum)"
    )
    ephemeral: bool = False
    labels: Labels = Field(default_factory=dict)


class MintResponse(Response):
    key: str = Field(description="The secret API key; shown only in this response")
    key_prefix: str
    id: str
    name: str
    subscription: str
    created_at: datetime
    expires_at: datetime
    ephemeral: bool
    labels: dict[str, str]


class KeyView(Response):
    id: str
    key_prefix: str
    name: str
    description: str
    username: str
    subscription: str
    status: KeyStatus
    ephemeral: bool
    labels: dict[str, str]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None


class KeyList(Response):
    object: Literal["list"] = "list"
    data: list[KeyView]
    has_more: bool = Field(alias="has_more")  # OpenAI list convention


class SearchFilters(Request):
    status: list[KeyStatus] = Field(default_factory=list, max_length=3)
    subscription: SubscriptionName | None = None
    name_contains: Annotated[str, StringConstraints(max_length=128)] | None = None
    description_contains: Annotated[str, StringConstraints(max_length=1024)] | None = None
    labels: Labels = Field(default_factory=dict)
    include_ephemeral: bool = False
    username: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class SearchSort(Request):
    by: Literal["created_at", "expires_at", "name"] = "created_at"
    order: Literal["asc", "desc"] = "desc"


class Pagination(Request):
    limit: int = Field(default=50, ge=1, le=100)
    offset: int = Field(default=0, ge=0, le=100_000)


class SearchRequest(Request):
    filters: SearchFilters = Field(default_factory=SearchFilters)
    sort: SearchSort = Field(default_factory=SearchSort)
    pagination: Pagination = Field(default_factory=Pagination)


class BulkRevokeRequest(Request):
    username: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = None
    subscription: SubscriptionName | None = None
    dry_run: bool = False
    reason: Annotated[str, StringConstraints(max_length=1024)] | None = None


class BulkRevokeResponse(Response):
    revoked_count: int
    key_ids: list[str]
    dry_run: bool
    message: str


class KeyConfig(Response):
    max_expiration_days: float
    default_expiration: str
    ephemeral_max_expiration: str
    key_format: str = "sk-oai-<id>_<secret>"


class ValidateRequest(Request):
    key: Annotated[str, StringConstraints(max_length=256)]


class ValidateResponse(Response):
    valid: bool
    reason: str | None = None
    user_id: str | None = None
    username: str | None = None
    groups: list[str] | None = None
    key_id: str | None = None
    key_name: str | None = None
    subscription: str | None = None


class TokenRateLimitView(Response):
    limit: int
    window: str


class ModelRefView(Response):
    name: str
    namespace: str
    token_rate_limits: list[TokenRateLimitView]
    billing_rate: str | None = None


class SubscriptionView(Response):
    id: str
    name: str
    namespace: str
    display_name: str | None = None
    description: str | None = None
    priority: int
    phase: str
    model_refs: list[ModelRefView]
    organization_id: str | None = None
    cost_center: str | None = None
    labels: dict[str, str]


class SubscriptionList(Response):
    object: Literal["list"] = "list"
    data: list[SubscriptionView]


class SelectRequest(Request):
    """What the generated AuthPolicy sends. Empty strings mean "not given" (CEL cannot omit a field)."""

    username: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    groups: list[Annotated[str, StringConstraints(max_length=253)]] = Field(default_factory=list, max_length=512)
    requested_subscription: Annotated[str, StringConstraints(max_length=317)] | None = Field(
        default=None, description="Value of the X-MaaS-Subscription header, if any"
    )
    key_subscription: Annotated[str, StringConstraints(max_length=317)] | None = Field(
        default=None, description="Subscription bound to the API key that authenticated the request"
    )
    model: Annotated[str, StringConstraints(max_length=317)] | None = Field(
        default=None,
        alias="requestedModel",
        description="MaaSModelRef as namespace/name",
    )


class SelectResponse(Response):
    """What the generated AuthPolicy reads: `name`/`namespace` (and the metering attribution the gateway
    copies into usage records: `organizationId`, `costCenter`, `labels`) on success; `error` (a stable code),
    `message` and, for `multiple_subscriptions`, `candidates` on failure. Absent, not null, when unset."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)

    selected: bool
    name: str | None = None
    namespace: str | None = None
    organization_id: str | None = None
    cost_center: str | None = None
    labels: dict[str, str] | None = None
    subscription: SubscriptionView | None = None
    error: str | None = None
    message: str | None = None
    candidates: list[str] | None = None


class SubscriptionRevokeResponse(Response):
    subscription: str
    revoked_count: int


class CleanupResponse(Response):
    purged_count: int
    cutoff: datetime


class Health(Response):
    status: Literal["ok"] = "ok"


class ModelView(Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = Field(alias="owned_by")
    kind: str
    url: str | None
    ready: bool
    subscriptions: list[str]


class ModelList(Response):
    object: Literal["list"] = "list"
    data: list[ModelView]
