"""Request and response bodies, in the shapes of the reference MaaS API (opendatahub-io/models-as-a-service,
its public OpenAPI description): camelCase for keys and models, the snake_case items of `/v1/subscriptions`,
OpenAI lists. maasctl-only fields are additions a reference client ignores (docs/compatibility.md). Requests
forbid unknown fields."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator
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
    expires_in: Annotated[str, StringConstraints(max_length=32)] | Annotated[int, Field(strict=True)] | None = Field(
        default=None,
        description="Lifetime such as '30d', '12h', '1.5d', '2h30m', or a number of seconds (bounded by the "
        "configured maximum)",
    )
    ephemeral: bool = False
    labels: Labels = Field(default_factory=dict)


class MintResponse(Response):
    key: str = Field(description="The secret API key; shown only in this response")
    key_prefix: str
    id: str
    name: str
    subscription: str = Field(description="MaaSSubscription name bound to the key (namespace/name outside the "
                              "subscription namespace)")
    created_at: datetime
    expires_at: datetime
    ephemeral: bool
    labels: dict[str, str]


class KeyView(Response):
    """A key's metadata (the reference's `ApiKey`: `creationDate`/`expirationDate`, the subscription by name)."""

    id: str
    key_prefix: str
    name: str
    description: str
    username: str
    groups: list[str] = Field(description="The owner's groups as last confirmed (at mint, or by the owner's token)")
    subscription: str = Field(description="MaaSSubscription name (namespace/name outside the subscription "
                              "namespace)")
    status: KeyStatus
    ephemeral: bool
    labels: dict[str, str]
    creation_date: datetime
    expiration_date: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None


class KeyList(Response):
    object: Literal["list"] = "list"
    data: list[KeyView]
    has_more: bool = Field(alias="has_more")  # OpenAI list convention


class SearchFilters(Request):
    status: list[KeyStatus] = Field(default_factory=list, max_length=3,
                                    description="Statuses to include; active keys only when empty or absent")
    subscription: SubscriptionName | None = None
    name_contains: Annotated[str, StringConstraints(max_length=128)] | None = None
    description_contains: Annotated[str, StringConstraints(max_length=1024)] | None = None
    labels_contain: Labels = Field(
        default_factory=dict, description="Keys carrying all of these label key/value pairs (the reference's name)"
    )
    labels: Labels = Field(default_factory=dict, description="Deprecated spelling of labelsContain")
    include_ephemeral: bool = False
    username: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


    @model_validator(mode="after")
    def _one_label_filter(self) -> SearchFilters:
        if self.labels and self.labels_contain:
            raise ValueError("give labelsContain or labels, not both")
        return self

    @property
    def label_filter(self) -> dict[str, str]:
        return self.labels_contain or self.labels


class SearchSort(Request):
    by: Literal["created_at", "expires_at", "last_used_at", "name"] = "created_at"
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
    """Counts only (no key ids, also on a dry run): the audit log records which keys were revoked."""

    revoked_count: int
    dry_run: bool
    message: str


class KeyConfig(BaseModel):
    """The reference's snake_case `{max_expiration_days, ephemeral_max_expiration}` plus maasctl's
    `default_expiration` and `key_format`."""

    max_expiration_days: int | float = Field(description="Whole days as an integer, as in the reference")
    ephemeral_max_expiration: str
    default_expiration: str
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
    labels: dict[str, str] | None = None


class TokenRateLimitView(Response):
    limit: int
    window: str


class ModelRefView(Response):
    name: str
    namespace: str
    token_rate_limits: list[TokenRateLimitView]
    billing_rate: str | None = None


class SubscriptionView(Response):
    """A subscription as the select callback returns it to the gateway (internal)."""

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


class Snake(BaseModel):
    """The reference's snake_case items (`/v1/subscriptions`, `/v1/model/{id}/subscriptions`)."""

    model_config = ConfigDict(populate_by_name=True)


class RateLimitItem(Snake):
    limit: int
    window: str


class BillingRateItem(Snake):
    per_token: str


class ModelRefItem(Snake):
    name: str = Field(description="Name of the MaaSModelRef")
    namespace: str = Field(description="maasctl: namespace of the MaaSModelRef (models of one name may live in "
                           "several namespaces)")
    model_name: str | None = Field(default=None, description="The name clients send as `model` (the "
                                   "MaaSModelRef's resolvedModelAlias)")
    display_name: str | None = Field(default=None, description="The MaaSModelRef's openshift.io/display-name")
    description: str | None = Field(default=None, description="The MaaSModelRef's openshift.io/description")
    source: str | None = Field(default=None, description="`external` (ExternalModel) or `internal` "
                               "(LLMInferenceService)")
    token_rate_limits: list[RateLimitItem]
    unlimited: bool = Field(default=False, description="maasctl: no token budget (usage is still metered)")
    billing_rate: BillingRateItem | None = None


class PlanLimitItem(Snake):
    kind: str = Field(description="`requests` or `tokens`")
    limit: int
    window: str = Field(description="`1m` or `24h`")
    name: str = Field(description="The limit's name, as a 429 names it")


class BillingTermsItem(Snake):
    """maasctl: the billing tenant of the subscription's organization and its Plan, on the subscription's Gateway
    (docs/billing.md). Plan limits count per tenant: every subscription of the organization shares them."""

    organization_id: str
    tenant: str = Field(description="The TenantAccount's name")
    tenant_namespace: str
    state: str | None = Field(default=None, description="Pending, Active, Warning, Grace, Dunning, Frozen, "
                              "Suspended or Closed; absent until the billing operator reports one")
    enforced: bool = Field(description="Frozen, Suspended or Closed: the tenant's requests are refused (403)")
    billing_mode: str | None = None
    plan: str = Field(description="The tenant's Plan")
    plan_found: bool
    limits: list[PlanLimitItem]
    model_scopes: list[str] = Field(default_factory=list, description="The models the Plan covers (globs); "
                                    "empty: every model")
    route: str | None = Field(default=None, description="The Plan targets this HTTPRoute: its limits apply there "
                              "only")


class SubscriptionListItem(Snake):
    subscription_id_header: str = Field(description="The value to send in X-MaaS-Subscription (the name; "
                                        "namespace/name outside the subscription namespace)")
    subscription_description: str = Field(description="Description annotation, else display name, else name")
    display_name: str | None = None
    priority: int
    model_refs: list[ModelRefItem]
    organization_id: str | None = None
    cost_center: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    namespace: str = Field(description="maasctl: the subscription's namespace")
    phase: str = Field(description="maasctl: the subscription's phase (Pending, Active, Degraded, Failed, ...)")
    billing: list[BillingTermsItem] | None = Field(
        default=None, description="maasctl: the billing Plan limits and tenant state that also apply (empty: "
        "none); absent while maas-api has not read the billing kinds (or billing is not installed)")


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
    gateway: Annotated[str, StringConstraints(max_length=317)] | None = Field(
        default=None,
        description="The Gateway (namespace/name) the request arrived through, when the model's route sits on "
        "exactly one; empty: the default Gateway",
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
    status: Literal["healthy"] = "healthy"


class SubscriptionInfo(Response):
    name: str
    display_name: str | None = None
    description: str | None = None


class ModelDetails(Response):
    display_name: str | None = None
    description: str | None = None


class ModelView(Response):
    id: str = Field(description="The name clients send in the request's model field (the model's resolved alias)")
    object: Literal["model"] = "model"
    created: int
    owned_by: str = Field(alias="owned_by", description="namespace/name of the MaaSModelRef")
    kind: str
    url: str | None
    ready: bool
    model_details: ModelDetails | None = None
    subscriptions: list[SubscriptionInfo]


class ModelList(Response):
    object: Literal["list"] = "list"
    data: list[ModelView]
