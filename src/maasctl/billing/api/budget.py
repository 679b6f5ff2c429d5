"""BudgetPolicy: spending caps with percentage thresholds and actions for a TenantAccount."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    Int32,
    KubeSchema,
    PrinterColumn,
)
from maasctl.billing.api._base import CATEGORY, GROUP, BillingObject
from maasctl.billing.api._types import KeysMatch, LocalObjectReference, MoneyField, Time


class BudgetPeriod(StrEnum):
    """Time window of a cap."""

    MONTHLY = "Monthly"
    WEEKLY = "Weekly"
    DAILY = "Daily"


class ThresholdAction(StrEnum):
    """What fires at a threshold; Notify always fires alongside Throttle or Freeze."""

    NOTIFY = "Notify"
    THROTTLE = "Throttle"
    FREEZE = "Freeze"


CapAmount = Annotated[Decimal, MoneyField("caps.amount")]
CurrentSpend = Annotated[Decimal, MoneyField("currentSpend")]
LABEL_KEYS = KeysMatch(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", 317,
                       "selector.keyLabels keys must be label keys ([prefix/]name)")
LabelValue = Annotated[str, Field(max_length=63, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")]
CapIndex = Annotated[Int32, Field(ge=0)]


class BudgetSelector(CamelModel):
    """Scopes a budget to some of the tenant's API keys."""

    key_labels: Annotated[dict[str, LabelValue], Field(max_length=16), LABEL_KEYS] | None = Field(
        default=None, description="Matches API keys carrying these labels.")


class BudgetThreshold(CamelModel):
    """A percentage of the cap at which an action fires."""

    pct: Annotated[Int32, Field(ge=1, le=100)] = Field(
        description="Percentage of the cap at which this threshold fires. Min: 1, Max: 100.")
    action: ThresholdAction = Field(description="Enforcement action: Notify, Throttle or Freeze.")


class BudgetCap(CamelModel):
    """A spending cap over a period."""

    amount: CapAmount = Field(description="Cap amount as a decimal string.")
    period: BudgetPeriod = Field(description="Time window: Monthly, Weekly or Daily.")
    thresholds: Annotated[
        list[BudgetThreshold], Field(min_length=1, max_length=16), KubeSchema(list_type="map", list_map_keys=("pct",))
    ] = Field(description="Percentage trigger points within this cap, at most one per pct. MinItems: 1.")


class BudgetPolicySpec(CamelModel):
    """Desired state of a BudgetPolicy."""

    tenant_ref: LocalObjectReference = Field(description="TenantAccount this budget applies to.")
    selector: BudgetSelector | None = Field(default=None, description="Scopes the budget to some API keys.")
    caps: Annotated[list[BudgetCap], Field(min_length=1, max_length=16)] = Field(
        description="Spending caps with thresholds. MinItems: 1.")


class CapPeriodEnd(CamelModel):
    """Where the current period of one cap ends."""

    cap_index: CapIndex = Field(description="Which cap in the spec this entry belongs to.")
    period_end: Time = Field(description="End of the current evaluation period for this cap (UTC).")


class FiredThreshold(CamelModel):
    """A threshold that fired in the current period."""

    cap_index: CapIndex = Field(description="Which cap in the spec this threshold belongs to.")
    pct: Annotated[Int32, Field(ge=1, le=100)] = Field(description="The threshold percentage that fired.")
    fired_at: Time = Field(description="When the threshold fired.")


class BudgetPolicyStatus(CamelModel):
    """Observed state of a BudgetPolicy."""

    current_spend: CurrentSpend | None = Field(
        default=None, description="Current period spend (decimal string), of the last-evaluated cap.")
    cap_period_ends: Annotated[list[CapPeriodEnd], Field(max_length=16)] | None = Field(
        default=None, description="Period boundary for each cap independently.")
    fired_thresholds: Annotated[list[FiredThreshold], Field(max_length=256)] | None = Field(
        default=None, description="Thresholds fired in the current period; reset on period rollover per cap.")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(default=None, max_length=16, description="Standard Kubernetes conditions.")


class BudgetPolicy(BillingObject):
    """Spending caps and threshold-based actions for a TenantAccount."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="budgetpolicies",
        short_names=("budget",),
        printer_columns=(
            PrinterColumn("Tenant", ".spec.tenantRef.name", description="TenantAccount."),
            PrinterColumn("Spend", ".status.currentSpend", description="Current period spend."),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
    )

    kind: Literal["BudgetPolicy"] = Field(default="BudgetPolicy", description="Kind of the object.")
    spec: BudgetPolicySpec = Field(description="Tenant, key selector and caps.")
    status: BudgetPolicyStatus | None = Field(default=None, description="Observed state.")



