"""Wire formats of usage ingestion (snake_case, exactly the gateway's `UsageRecord` fields) and of the
report API (camelCase like the rest of maas-api)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from maasctl.contract.usage import MAX_TOKENS, UsageRecord
from maasctl.maasapi.schemas import Response
from maasctl.maasapi.usage.store import UsageEntry

RecordId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]
Name = Annotated[str, StringConstraints(max_length=253)]
Ref = Annotated[str, StringConstraints(max_length=317)]
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS, strict=True)]


class UsageRecordIn(UsageRecord):
    """One request as reported by the gateway: the shared wire type (`contract.usage.UsageRecord`)."""

    @property
    def consistent_total(self) -> int:
        """`total_tokens`, but never less than input + output (cached and reasoning tokens are part of those):
        a record reporting a smaller total would undercount every report and export built on the total."""
        return max(self.total_tokens, self.input_tokens + self.output_tokens)

    def entry(self) -> UsageEntry:
        return UsageEntry(
            id=self.request_id,
            ts=self.time,
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
            total_tokens=self.consistent_total,
            charged_tokens=self.charged_tokens,
            cost_center=self.cost_center,
            labels=dict(self.labels),
            estimated=self.estimated,
            estimate_reason=self.estimate_reason,
            termination=self.termination,
            provider=self.provider,
        )


class UsageBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[UsageRecordIn] = Field(min_length=1)


class RejectedRecord(Response):
    """A record of an otherwise accepted batch that was not stored, and why (for the sender's log)."""

    index: int = Field(description="Position of the record in the batch")
    request_id: str
    code: str = Field(description="Stable reason code, e.g. timestamp_too_old")
    message: str


class IngestResponse(Response):
    accepted: int = Field(description="Records stored by this request")
    duplicates: int = Field(description="Records already stored earlier (same id): not counted again")
    rejected: list[RejectedRecord] | None = Field(
        default=None, description="Records refused one by one and not stored (absent when none); resending them "
        "cannot succeed")


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


class UsageRecordOut(Response):
    """One stored usage record (camelCase, as the rest of maas-api)."""

    id: str
    ts: datetime
    received_at: datetime
    username: str
    key_id: str
    subscription: str
    organization_id: str
    cost_center: str
    labels: dict[str, str]
    model: str
    route: str
    status: int
    latency_ms: float
    streamed: bool
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    charged_tokens: int
    estimated: bool
    estimate_reason: str
    termination: str
    provider: str = Field(default="", description="A model with several providers: the one that served")
