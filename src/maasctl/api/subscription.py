"""MaaSSubscription: a plan giving owners access to models with per-model token rate limits (seed 000)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    Int32,
    KubeObject,
    KubeSchema,
    PrinterColumn,
    Rule,
    model_rules,
)
from maasctl.api._common import GroupList, PolicyPhase, ResourceRefStatus
from maasctl.api._fields import (
    DNS_LABEL_PATTERN,
    CostCenter,
    MeteringLabels,
    NamespaceName,
    ObjectName,
    OrganizationId,
    SubscriptionUsers,
    TokenLimit,
    Window,
    safe,
)

ALL_AUTHENTICATED = "*"

LIMITS_XOR_UNLIMITED = Rule(
    rule="has(self.tokenRateLimits) != (has(self.unlimited) && self.unlimited)",
    message="each modelRefs entry must set either tokenRateLimits (at least one entry) or unlimited: true, "
    "not both and not neither",
)
ORG_ID_IMMUTABLE = Rule(
    rule="self.id == oldSelf.id",
    message="organization.id is immutable: it may be set once and cannot be changed",
)
ORG_ID_NOT_REMOVABLE = Rule(
    rule="has(self.organization) || !has(oldSelf.organization)",
    message="organization.id cannot be removed once set",
)


class TokenRateLimit(CamelModel):
    """A token budget per user over a time window."""

    limit: TokenLimit = Field(description="Maximum number of tokens allowed in the window (at least 1).")
    window: Window = Field(
        description="Time window: 1-9999 followed by s, m or h (e.g. 1m, 1h, 24h). Pattern "
        "^[1-9]\\d{0,3}(s|m|h)$. Days are not accepted: use hours instead (24h, not 1d)."
    )


class BillingRate(CamelModel):
    """Price of tokens under this subscription, for showback."""

    per_token: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="Cost per token as a non-negative decimal string, e.g. 0.000002.",
    )


GUARDRAILS_CONFIG_REQUIRED = Rule(
    rule="!self.enabled || has(self.config)",
    message="guardrails.config is required when guardrails.enabled is true",
)


class ModelGuardrails(CamelModel):
    """Guardrails for one model of the subscription (enforced only while the global switch is on)."""

    model_config = ConfigDict(json_schema_extra=model_rules(GUARDRAILS_CONFIG_REQUIRED))

    enabled: bool = Field(description="Check this model's requests and responses with the configuration.")
    config: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="ID (name) of a GuardrailConfig in the subscription namespace. Required when enabled; a "
        "missing configuration is reported as a condition, and the model's requests are refused, never passed "
        "unchecked.",
    )

    @model_validator(mode="after")
    def _config_when_enabled(self) -> Self:
        if self.enabled and self.config is None:
            raise ValueError(GUARDRAILS_CONFIG_REQUIRED.message)
        return self


class ModelSubscriptionRef(CamelModel):
    """A model included in the subscription, with its token budget."""

    model_config = ConfigDict(json_schema_extra=model_rules(LIMITS_XOR_UNLIMITED))

    name: ObjectName = Field(description="Name of the MaaSModelRef.")
    namespace: NamespaceName = Field(description="Namespace where the MaaSModelRef lives.")
    token_rate_limits: Annotated[list[TokenRateLimit], Field(min_length=1, max_length=16)] | None = Field(
        default=None,
        description="Token-based rate limits for this model, all enforced (at least one entry when set). "
        "Required unless unlimited is true.",
    )
    unlimited: bool | None = Field(
        default=None,
        description="Access to this model without a token budget; usage is still metered. Mutually exclusive "
        "with tokenRateLimits.",
    )
    billing_rate: BillingRate | None = Field(default=None, description="Cost per token.")
    guardrails: ModelGuardrails | None = Field(
        default=None, description="Guardrails for this model: enabled and the GuardrailConfig to use."
    )

    @model_validator(mode="after")
    def _limits_xor_unlimited(self) -> Self:
        if (self.token_rate_limits is not None) == bool(self.unlimited):
            raise ValueError(LIMITS_XOR_UNLIMITED.message)
        return self


class OwnerSpec(CamelModel):
    """Users and groups entitled to select this subscription; not Kubernetes ownership or RBAC."""

    groups: GroupList | None = Field(
        default=None, description="Identity groups entitled to select this subscription; matched exactly."
    )
    users: SubscriptionUsers | None = Field(
        default=None,
        description="User names entitled to select this subscription; matched exactly. The entry * is a "
        "wildcard meaning every authenticated user.",
    )


class SubscriptionOrganization(CamelModel):
    """Stable organization association for delegated administration and organization_id telemetry."""

    model_config = ConfigDict(json_schema_extra=model_rules(ORG_ID_IMMUTABLE))

    id: Annotated[str, Field(min_length=1, max_length=253), safe("organization.id")] = Field(
        description="Non-empty organization identifier. May be set once (also on an existing subscription "
        "without one) and then never changed or removed."
    )


class TokenMetadata(CamelModel):
    """Metadata for token attribution and metering."""

    organization_id: OrganizationId | None = Field(
        default=None, description="Legacy organization attribution, used when organization.id is unset."
    )
    cost_center: CostCenter | None = Field(default=None, description="Cost center that usage is attributed to.")
    labels: MeteringLabels | None = Field(default=None, description="Extra labels for usage records.")


class TenantGatewayRef(CamelModel):
    """A Gateway API Gateway the controller manages (its default Gateway or one named with --tenant-gateway)."""

    name: ObjectName = Field(description="Name of the Gateway.")
    namespace: NamespaceName = Field(description="Namespace of the Gateway.")


class MaaSSubscriptionSpec(CamelModel):
    """Desired state of a MaaSSubscription."""

    model_config = ConfigDict(json_schema_extra=model_rules(ORG_ID_NOT_REMOVABLE))

    owner: OwnerSpec = Field(description="Users and groups entitled to select this subscription.")
    organization: SubscriptionOrganization | None = Field(
        default=None,
        description="Stable organization association. organization.id may be set only once and cannot be "
        "replaced or removed; it does not change inference access.",
    )
    model_refs: Annotated[
        list[ModelSubscriptionRef],
        Field(min_length=1, max_length=128),
        KubeSchema(list_type="map", list_map_keys=("namespace", "name")),
    ] = Field(description="Models included, each with token rate limits or unlimited: true.")
    token_metadata: TokenMetadata | None = Field(
        default=None,
        description="Metadata for token attribution and metering; tokenMetadata.organizationId is the legacy "
        "fallback when organization.id is unset.",
    )
    priority: Int32 = Field(
        default=0,
        description="Subscription priority when a user has several (higher wins); only selects among "
        "subscriptions. Default 0.",
    )
    inference_priority: Int32 | None = Field(
        default=None,
        description="Scheduling priority of inference requests under this subscription (signed; higher is "
        "scheduled first, negative below the scheduler default). Omitted: no InferenceObjective and the "
        "scheduler applies 0; an explicit 0 creates an InferenceObjective with priority 0.",
    )
    gateway_ref: TenantGatewayRef | None = Field(
        default=None,
        description="The tenant Gateway this subscription is used through; requests arriving through any other "
        "Gateway cannot select it. Omitted: the controller's default Gateway.",
    )


class TokenRateLimitStatus(ResourceRefStatus):
    """Observed state of a generated TokenRateLimitPolicy."""

    model: str | None = Field(default=None, max_length=253, description="Name of the MaaSModelRef.")
    model_namespace: str | None = Field(default=None, max_length=63, description="Namespace of the MaaSModelRef.")


class PoolReference(CamelModel):
    """An InferencePool, in the namespace of the flow-control entry."""

    group: str | None = Field(default=None, max_length=253, description="API group of the pool.")
    kind: str | None = Field(default=None, max_length=63, description="Kind of the pool (InferencePool).")
    name: str = Field(max_length=253, description="Name of the pool.")


class FlowControlStatus(CamelModel):
    """Request-priority state for one referenced model."""

    name: str = Field(max_length=253, description="Name of the MaaSModelRef.")
    namespace: str = Field(
        max_length=63,
        description="Namespace of the MaaSModelRef; the InferencePool and InferenceObjective live here too.",
    )
    inference_pool: PoolReference | None = Field(
        default=None,
        description="InferencePool observed in the LLMInferenceService's status.router.scheduler.inferencePool.",
    )
    objective_name: str | None = Field(
        default=None,
        max_length=253,
        description="InferenceObjective name for this subscription and pool; set whenever the pool is known, "
        "also when inferencePriority is unset.",
    )
    ready: bool = Field(description="True when no request-priority reconciliation is left for this model.")
    reason: str | None = Field(
        default=None,
        max_length=256,
        description="Machine-readable reason for ready, e.g. ObjectiveReconciled, PriorityUnset, "
        "NotApplicable, PoolPending; new reasons may be added.",
    )
    message: str | None = Field(default=None, max_length=1024, description="Human-readable detail.")


class SubscriptionPhase(StrEnum):
    """Lifecycle phase of a MaaSSubscription: a policy's phases, plus Terminating while it is being deleted and
    its key cleanup has not finished (seed 000)."""

    PENDING = PolicyPhase.PENDING.value
    ACTIVE = PolicyPhase.ACTIVE.value
    DEGRADED = PolicyPhase.DEGRADED.value
    FAILED = PolicyPhase.FAILED.value
    INVALID = PolicyPhase.INVALID.value
    TERMINATING = "Terminating"


class MaaSSubscriptionStatus(CamelModel):
    """Observed state of a MaaSSubscription."""

    phase: SubscriptionPhase | None = Field(
        default=None, description="Active, Degraded, Failed, Pending, Invalid, or Terminating while it is being "
        "deleted and its API keys are being revoked.")
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None,
        max_length=16,
        description="Latest observations: Ready, SpecPriorityDuplicate, InferenceObjectivesReady, "
        "GuardrailsReady.",
    )
    model_ref_statuses: Annotated[list[ResourceRefStatus], Field(max_length=128)] | None = Field(
        default=None, description="Per referenced MaaSModelRef: found and ready or not."
    )
    token_rate_limit_statuses: Annotated[list[TokenRateLimitStatus], Field(max_length=128)] | None = Field(
        default=None, description="Generated TokenRateLimitPolicies and whether they are accepted."
    )
    flow_control_statuses: Annotated[list[FlowControlStatus], Field(max_length=128)] | None = Field(
        default=None, description="Per referenced model: InferencePool and InferenceObjective state."
    )


class MaaSSubscription(KubeObject):
    """A subscription plan with per-model token rate limits. Accepted only in the subscription namespace.

    The annotations openshift.io/display-name and openshift.io/description give a human-readable name and
    description.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="maassubscriptions",
        short_names=("maassub", "msub"),
        printer_columns=(
            PrinterColumn(
                "Display Name",
                ".metadata.annotations.openshift\\.io/display-name",
                description="openshift.io/display-name annotation.",
            ),
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            PrinterColumn("Priority", ".spec.priority", "integer", description="Selection priority."),
            PrinterColumn("Organization", ".spec.organization.id", description="Organization id.", priority=1),
            PrinterColumn(
                "Description",
                ".metadata.annotations.openshift\\.io/description",
                description="openshift.io/description annotation.",
                priority=1,
            ),
            AGE_COLUMN,
        ),
    )

    kind: Literal["MaaSSubscription"] = Field(default="MaaSSubscription", description="Kind of the object.")
    spec: MaaSSubscriptionSpec = Field(description="Owners, models, limits and priorities.")
    status: MaaSSubscriptionStatus | None = Field(default=None, description="Observed state, written by maasctl.")
