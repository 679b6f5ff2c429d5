"""Plan: rate limits and model scopes for the tenants on it, compiled into Kuadrant (and Kueue) objects."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    Int32,
    KubeSchema,
    PrinterColumn,
    Rule,
    model_rules,
)
from maasctl.billing.api._base import CATEGORY, GROUP, BillingObject
from maasctl.billing.api._types import GEO_PATTERN, NonNegativeInt64, ObjectName

GATEWAY_GROUP = "gateway.networking.k8s.io"
TARGET_KINDS = ("Gateway", "HTTPRoute")
ALL_GEOS = "*"

TARGET_GROUP_RULE = Rule(
    rule=f"self.group == '{GATEWAY_GROUP}'",
    message=f"targetRef.group must be {GATEWAY_GROUP}",
)
TARGET_KIND_RULE = Rule(
    rule="self.kind in " + str(list(TARGET_KINDS)).replace('"', "'"),
    message="targetRef.kind must be Gateway or HTTPRoute: the kinds both RateLimitPolicy, TokenRateLimitPolicy and "
    "AuthPolicy can attach to",
)

ModelGlob = Annotated[str, Field(min_length=1, max_length=253), KubeSchema(rules=(Rule(
    rule="self.matches('^[a-z0-9*?]([-a-z0-9.*?/]*)$')",
    message="modelScopes entries are globs of model names: lowercase letters, digits, '-', '.', '/' and the "
    "wildcards * and ?",
),))]
GeoScope = Annotated[str, Field(min_length=1, max_length=63), KubeSchema(rules=(Rule(
    rule=f"self == '{ALL_GEOS}' || self.matches('{GEO_PATTERN}')",
    message="geoScopes entries are * (every region) or a region name of lowercase letters, digits and '-'",
),))]
QueueClass = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")]
NonNegative32 = Annotated[Int32, Field(ge=0)]
NonNegative64 = NonNegativeInt64


class PlanLimits(CamelModel):
    """Rate limit thresholds, each counted per tenant."""

    tokens_per_minute: NonNegative64 | None = Field(default=None, description="Token rate limit per minute. Min: 0.")
    tokens_per_day: NonNegative64 | None = Field(default=None, description="Token rate limit per day. Min: 0.")
    requests_per_minute: NonNegative32 | None = Field(
        default=None, description="Request rate limit per minute. Min: 0.")
    max_concurrency: NonNegative32 | None = Field(
        default=None,
        description="Concurrent request limit. Not compilable to Kuadrant (stored only; sets the UnsupportedField "
        "condition). Min: 0.")
    gpu_quota: NonNegative32 | None = Field(
        default=None,
        description="Max GPUs for Kueue workloads. When set, a per-tenant ClusterQueue with this nominalQuota for "
        "nvidia.com/gpu is managed. Min: 0.")


class PolicyTargetReference(CamelModel):
    """The Gateway API object the Plan attaches to (LocalPolicyTargetReferenceWithSectionName)."""

    model_config = ConfigDict(json_schema_extra=model_rules(TARGET_GROUP_RULE, TARGET_KIND_RULE))

    group: Annotated[str, Field(max_length=253)] = Field(description="Group of the target (gateway.networking.k8s.io).")
    kind: Annotated[str, Field(min_length=1, max_length=63)] = Field(description="Kind of the target: Gateway or "
                                                                     "HTTPRoute.")
    name: ObjectName = Field(description="Name of the target, in the Plan's namespace.")
    section_name: Annotated[str, Field(min_length=1, max_length=253,
                                       pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] | None = Field(
        default=None, description="Listener (Gateway) or rule (HTTPRoute) name within the target.")


class PlanSpec(CamelModel):
    """Desired state of a Plan."""

    limits: PlanLimits = Field(description="Rate limit thresholds for this plan, counted per tenant.")
    model_scopes: Annotated[list[ModelGlob], Field(max_length=64), KubeSchema(list_type="set")] | None = Field(
        default=None,
        description="Glob patterns of model names the plan's tenants may use (e.g. llama-3-*); a pattern with a "
        "'/' matches <namespace>/<name>. Compiled into AuthPolicy CEL predicates. Unset: every model.")
    geo_scopes: Annotated[list[GeoScope], Field(min_length=1, max_length=32), KubeSchema(list_type="set")] = Field(
        default_factory=lambda: [ALL_GEOS],
        json_schema_extra={"default": [ALL_GEOS]},
        description='Geographic scopes. ["*"] means all regions; else the region of the target (its '
        "billing.opendatahub.io/geo label) must be listed.")
    queue_class: QueueClass | None = Field(
        default=None, description="Informational annotation passed to the serving layer.")
    target_ref: PolicyTargetReference = Field(
        description="Gateway API resource this Plan attaches to (standard policy attachment pattern).")
    price_book_ref: ObjectName | None = Field(default=None, description="Name of the PriceBook to use for rating.")


class CompiledPolicyRef(CamelModel):
    """One object the compiler manages for this Plan."""

    group: str = Field(max_length=253, description="API group of the compiled object.")
    kind: str = Field(max_length=63, description="Kind of the compiled object.")
    name: str = Field(max_length=253, description="Name of the compiled object.")
    namespace: str | None = Field(default=None, max_length=63,
                                  description="Namespace of the compiled object (unset for cluster-scoped ones).")
    up_to_date: bool = Field(description="Whether the compiled object matches the desired state.")


class PlanStatus(CamelModel):
    """Observed state of a Plan."""

    compiled_policies: Annotated[list[CompiledPolicyRef], Field(max_length=1024)] | None = Field(
        default=None, description="Managed Kuadrant (and Kueue) objects produced by the compiler.")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(
        default=None, max_length=16,
        description="Compiled, Drifted, AdoptionConflict, KuadrantNotInstalled, GatewayNotFound, UnsupportedField.")


class Plan(BillingObject):
    """A billing plan with rate limits and model scopes that compiles down to Kuadrant TokenRateLimitPolicy,
    RateLimitPolicy and AuthPolicy objects attached to targetRef."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="plans",
        short_names=("bplan",),
        printer_columns=(
            PrinterColumn("TargetKind", ".spec.targetRef.kind", description="Kind of the target.", priority=1),
            PrinterColumn("TargetName", ".spec.targetRef.name", description="Name of the target.", priority=1),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
    )

    kind: Literal["Plan"] = Field(default="Plan", description="Kind of the object.")
    spec: PlanSpec = Field(description="Limits, scopes and the Gateway API target.")
    status: PlanStatus | None = Field(default=None, description="Observed state, written by the controller.")
