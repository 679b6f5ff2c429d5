"""Wire formats of usage ingestion (snake_case, exactly the gateway's `UsageRecord` fields) and of the
report API (camelCase like the rest of maas-api)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from maasctl.maasapi.schemas import Response
from maasctl.maasapi.usage.store import UsageEntry

MAX_TOKENS = 10**12  # per request; far above any model's context, far below BIGINT
RecordId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]
Name = Annotated[str, StringConstraints(max_length=253)]
Ref = Annotated[str, StringConstraints(max_length=317)]
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS, strict=True)]


class UsageRecordIn(BaseModel):
    """One request as reported by the gateway. `request_id` is the idempotency key. `timestamp` is Unix
    seconds (or an ISO 8601 time with offset); `organization` is the organization id the gateway took from
    the subscription's `organization.id`, else `tokenMetadata.organizationId`, stored as sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: RecordId = Field(validation_alias=AliasChoices("request_id", "id"))
    timestamp: AwareDatetime | float
    user: Name = ""
    key_id: Annotated[str, StringConstraints(max_length=64)] = ""
    subscription: Ref = ""
    organization: Name = Field(default="", validation_alias=AliasChoices("organization", "organization_id"))
    model: Ref = ""
    route: Ref = ""
    status: Annotated[int, Field(ge=0, le=999, strict=True)]
    latency_ms: Annotated[float, Field(ge=0, le=86_400_000)] = 0.0
    streamed: bool = False
    input_tokens: Tokens = 0
    cached_tokens: Tokens = 0
    output_tokens: Tokens = 0
    reasoning_tokens: Tokens = 0
    total_tokens: Tokens = 0
    charged_tokens: Tokens = 0

    @field_validator("timestamp")
    @classmethod
    def _sane_time(cls, value: datetime | float) -> datetime | float:
        if isinstance(value, float | int) and not 0 < value < 32_503_680_000:  # before year 3000
            raise ValueError("timestamp must be Unix seconds")
        return value

    def entry(self) -> UsageEntry:
        ts = (self.timestamp.astimezone(UTC) if isinstance(self.timestamp, datetime)
              else datetime.fromtimestamp(self.timestamp, UTC))
        return UsageEntry(
            id=self.request_id,
            ts=ts,
            username=self.user,
            key_id=self.key_id,
            subscription=self.subscription,
            organization_id=self.organization,
            model=self.model,
            route=self.route,
            status=self.status,
            latency_ms=self.latency_ms,
            streamed=self.streamed,
            input_tokens=self.input_tokens,
            cached_tokens=self.cached_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
            total_tokens=self.total_tokens,
            charged_tokens=self.charged_tokens,
        )


class UsageBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[UsageRecordIn] = Field(min_length=1)


class IngestResponse(Response):
    accepted: int = Field(description="Records stored by this request")
    duplicates: int = Field(description="Records already stored earlier (same id): not counted again")


class TokenCounts(Response):
    requests: int
    failed_requests: int
    total_tokens: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int


class ReportRow(TokenCounts):
    username: str
    subscription: str


class UsageReport(Response):
    object: Literal["usage_report"] = "usage_report"
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    data: list[ReportRow]
    totals: TokenCounts
    has_more: bool = False


class LimitView(Response):
    limit: int
    window: str


class ModelUsage(TokenCounts):
    model: str
    unlimited: bool = False
    in_subscription: bool = Field(description="False for usage of a model no longer part of the subscription")
    token_rate_limits: list[LimitView]


class SubscriptionUsage(Response):
    object: Literal["subscription_usage"] = "subscription_usage"
    subscription: str
    username: str | None = Field(description="Whose usage (None: all users; admins only)")
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    models: list[ModelUsage]
    totals: TokenCounts


class PurgeResponse(Response):
    raw_purged: int
    hourly_purged: int
    raw_cutoff: datetime
    hourly_cutoff: datetime | None
