"""The usage record every process shares (gateway -> maas-api -> billing), its bounds, and the completion
bounds the data plane and the builders agree on. How a request is counted (the request the backend receives,
how usage is read from the answer, what is charged when it cannot be read) is the data plane's
(`maasctl.dataplane`).

The usage record (`UsageRecord`) carries who (user, key id, subscription, organization id, cost center, the
subscription's labels), what (model, route), how much (tokens of every kind, the tokens charged to the
counters, whether they were estimated) and how it ended (status, `termination`); never credentials or content.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

__all__ = [
    "COMPLETION_LIMIT_FIELDS",
    "DEFAULT_COMPLETION_CEILING",
    "MAX_TOKENS",
    "Termination",
    "UsageRecord",
]

MAX_TOKENS: Final = 10**12  # per request; far above any model's context, far below BIGINT
DEFAULT_COMPLETION_CEILING: Final = 4096
"""The completion tokens a request reserves (and is charged when usage is unreadable) when it states no bound
and its model sets no `maxCompletionTokens`."""
COMPLETION_LIMIT_FIELDS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""The fields in which a client states its completion bound (chat, legacy/completions, responses)."""

Termination = Literal["complete", "client_disconnect", "upstream_error", "truncated", "refused"]


Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS, strict=True)]
Name = Annotated[str, StringConstraints(max_length=253)]
Ref = Annotated[str, StringConstraints(max_length=317)]


class UsageRecord(BaseModel):
    """One request as the gateway reports it (snake_case on the wire). `request_id` is the idempotency key;
    `timestamp` is Unix seconds. Validated the same way where it is produced and where it is ingested."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")] = Field(
        validation_alias=AliasChoices("request_id", "id"))
    timestamp: AwareDatetime | float
    user: Name = ""
    key_id: Annotated[str, StringConstraints(max_length=64)] = ""
    subscription: Ref = ""
    organization: Name = Field(default="", validation_alias=AliasChoices("organization", "organization_id"))
    cost_center: Name = ""
    labels: Annotated[dict[Annotated[str, StringConstraints(max_length=317)], Name], Field(max_length=64)] = Field(
        default_factory=dict)
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
    estimated: bool = False
    estimate_reason: Annotated[str, StringConstraints(max_length=256)] = ""
    termination: Termination = "complete"
    # Guardrails (docs/guardrails.md): "" (not guarded), passed, blocked_input, blocked_output, fail_open
    # (the engine failed and FailOpen let the request through), unavailable (refused: engine or config down).
    guardrails: Annotated[str, StringConstraints(max_length=32)] = ""
    # A model with several providers (docs/providers.md): the provider that served, or whose failure is the
    # answer; "" for a model with one provider.
    provider: Annotated[str, StringConstraints(max_length=63)] = ""

    @field_validator("timestamp")
    @classmethod
    def _sane_time(cls, value: datetime | float) -> datetime | float:
        if isinstance(value, float | int) and not 0 < value < 32_503_680_000:  # before year 3000
            raise ValueError("timestamp must be Unix seconds")
        return value

    @property
    def time(self) -> datetime:
        ts = self.timestamp
        return ts.astimezone(UTC) if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
