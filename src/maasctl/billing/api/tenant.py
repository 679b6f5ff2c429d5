"""TenantAccount: the organisation that pays, with its plan, billing mode and wallet mirror."""

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
    Rule,
)
from maasctl.billing.api._base import CATEGORY, GROUP, BillingObject
from maasctl.billing.api._types import LocalObjectReference, MoneyField, NonNegativeInt64, ObjectName, Time


class BillingMode(StrEnum):
    """How usage is billed."""

    SHOWBACK_ONLY = "ShowbackOnly"
    PREPAID = "Prepaid"
    INVOICED = "Invoiced"


class GpuFreezeMode(StrEnum):
    """GPU workload handling on balance depletion."""

    DRAIN = "Drain"
    PREEMPT = "Preempt"


class TenantState(StrEnum):
    """Lifecycle state of a TenantAccount."""

    PENDING = "Pending"
    ACTIVE = "Active"
    WARNING = "Warning"
    GRACE = "Grace"
    DUNNING = "Dunning"
    FROZEN = "Frozen"
    SUSPENDED = "Suspended"
    CLOSED = "Closed"


ThresholdAmount = Annotated[Decimal, MoneyField("reloadPolicy.thresholdAmount")]
ReloadAmount = Annotated[Decimal, MoneyField("reloadPolicy.reloadAmount")]
MonthlyCapAmount = Annotated[Decimal, MoneyField("reloadPolicy.monthlyCapAmount")]
GraceAmount = Annotated[Decimal, MoneyField("gracePolicy.graceAmount")]
WarningThreshold = Annotated[Decimal, MoneyField("gracePolicy.warningThreshold")]
Balance = Annotated[Decimal, MoneyField("balance", signed=True)]
Spend = Annotated[Decimal, MoneyField("mtdSpend")]
RunwayDays = Annotated[Decimal, MoneyField("runwayDays")]
AllowanceTokens = Annotated[Decimal, MoneyField("allowanceTokens")]


class ReloadPolicy(CamelModel):
    """Automatic wallet reload (Prepaid mode only)."""

    enabled: bool = Field(description="Whether automatic reload is active.")
    threshold_amount: ThresholdAmount = Field(description="Balance level that triggers a reload.")
    reload_amount: ReloadAmount = Field(description="Amount to add on each reload.")
    monthly_cap_amount: MonthlyCapAmount = Field(description="Maximum reload spend per calendar month.")
    max_reloads_per_day: Annotated[Int32, Field(ge=0)] | None = Field(
        default=None, description="Maximum reload attempts in a rolling 24-hour window. 0 = no limit. Min: 0.")


class GracePolicy(CamelModel):
    """Behaviour when the balance drops to zero."""

    grace_amount: GraceAmount = Field(
        default=Decimal("0.000000"),
        json_schema_extra={"default": "0.000000"},
        description='Amount below zero allowed before enforcement fires. Default "0.000000" (freeze on the next '
        "request after crossing zero; the request that crossed zero still completes).")
    warning_threshold: WarningThreshold | None = Field(
        default=None, description="Balance level at which Warning state is entered (advisory only).")


class TenantAccountSpec(CamelModel):
    """Desired state of a TenantAccount."""

    display_name: Annotated[str, Field(min_length=1, max_length=256)] = Field(description="Human-readable tenant name.")
    plan_ref: LocalObjectReference = Field(description="Plan that governs this tenant's rate limits.")
    price_book_pin: ObjectName | None = Field(
        default=None,
        description='Pins the tenant to a PriceBook by name, overriding the default "follow Active" behaviour '
        "(grandfathering).")
    billing_mode: BillingMode = Field(description="How usage is billed.")
    psp_customer_secret_ref: LocalObjectReference | None = Field(
        default=None, description="Secret containing PSP customer data (keys: customerId, defaultPaymentMethodId).")
    billing_connector_ref: LocalObjectReference | None = Field(
        default=None, description="BillingConnector providing payment processing. Required for auto-reload.")
    reload_policy: ReloadPolicy | None = Field(default=None, description="Automatic wallet reload (Prepaid only).")
    grace_policy: GracePolicy | None = Field(default=None, description="Behaviour when balance drops to zero.")
    gpu_freeze_mode: GpuFreezeMode = Field(
        default=GpuFreezeMode.DRAIN,
        description="GPU workload handling on balance depletion: Drain (running workloads finish, no new ones "
        "admitted) or Preempt (running workloads evicted).")


class AllowanceLimit(CamelModel):
    """A Prepaid tenant's token cap for one allowance epoch (a UTC day), counted by the gateway since the
    epoch's start (docs/billing.md, "Wallet enforcement")."""

    epoch: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", max_length=10)] = Field(
        description="The epoch's UTC date (YYYY-MM-DD).")
    tokens: NonNegativeInt64 = Field(
        description="Tokens rated since the epoch's start plus those the wallet can still pay for at the highest "
        "token price.")


UNIQUE_EPOCHS = Rule("self.all(a, self.exists_one(b, b.epoch == a.epoch))",
                     "allowanceLimits names each epoch once")
"""Two caps for one epoch would be two answers for one counter. The list stays atomic (the controller writes it
whole by server-side apply); the Plan compiler keeps the lower cap of an epoch named twice anyway."""


class TenantAccountStatus(CamelModel):
    """Observed state of a TenantAccount."""

    state: TenantState | None = Field(default=None, description="Current lifecycle state.")
    balance: Balance | None = Field(
        default=None, description="Wallet balance mirrored from the ledger (not authoritative).")
    balance_observed_at: Time | None = Field(default=None, description="When the balance was last computed.")
    runway_days: RunwayDays | None = Field(default=None, description="Estimated days of service left.")
    mtd_spend: Spend | None = Field(default=None, description="Month-to-date spend.")
    allowance_tokens: AllowanceTokens | None = Field(
        default=None, description="Tokens the balance (plus grace) still pays for at the highest token price.")
    allowance_limits: Annotated[list[AllowanceLimit], Field(max_length=2), KubeSchema(rules=(
        UNIQUE_EPOCHS,))] | None = Field(
        default=None, description="The gateway's token caps of the current and the previous allowance epoch "
        "(Prepaid), enforced as the Plan's TokenRateLimitPolicy limits.")
    consecutive_payment_failures: Annotated[Int32, Field(ge=0)] | None = Field(
        default=None, description="Consecutive payment failures (Dunning to Frozen after 3). Reset on success.")
    pending_reload_intent_id: Annotated[str, Field(max_length=255)] | None = Field(
        default=None, alias="pendingReloadIntentID", description="PSP intent ID of an in-flight reload payment.")
    payment_method_changed_at: Time | None = Field(
        default=None, description="When the tenant's payment method was last changed.")
    last_psp_customer_secret_ref: Annotated[str, Field(max_length=253)] | None = Field(
        default=None, alias="lastPSPCustomerSecretRef",
        description="Name of the last-observed pspCustomerSecretRef, to detect payment method changes.")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(default=None, max_length=16, description="Standard Kubernetes conditions.")


class TenantAccount(BillingObject):
    """A billing tenant (the organisation that pays) with a plan, a billing mode and a wallet."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="tenantaccounts",
        short_names=("tenant", "ta"),
        printer_columns=(
            PrinterColumn("State", ".status.state", description="Lifecycle state."),
            PrinterColumn("Mode", ".spec.billingMode", description="Billing mode."),
            PrinterColumn("Balance", ".status.balance", description="Wallet balance (mirror)."),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
    )

    kind: Literal["TenantAccount"] = Field(default="TenantAccount", description="Kind of the object.")
    spec: TenantAccountSpec = Field(description="Plan, billing mode, payment and wallet policies.")
    status: TenantAccountStatus | None = Field(default=None, description="Observed state, written by the controller.")
