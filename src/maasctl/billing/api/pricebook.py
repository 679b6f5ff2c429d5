"""PriceBook: the catalogue of SKU rates, volume discounts and committed-use tiers in force from a date."""

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
from maasctl.billing.api._types import (
    GEO_PATTERN,
    KeysMatch,
    LocalObjectReference,
    MoneyField,
    NonNegativeInt64,
    ObjectName,
    PositiveInt64,
    Time,
)


class Currency(StrEnum):
    """ISO 4217 currency code."""

    USD = "USD"
    EUR = "EUR"
    GBP = "GBP"
    JPY = "JPY"
    CAD = "CAD"
    AUD = "AUD"
    CHF = "CHF"


class ProviderFaultPolicy(StrEnum):
    """What a request costs when the upstream model fails."""

    ZERO_CHARGE = "zero_charge"
    BILL_PARTIAL = "bill_partial"


class ClientDisconnectPolicy(StrEnum):
    """What a request costs when the client disconnects mid-stream."""

    BILL_PARTIAL = "bill_partial"
    ZERO_CHARGE = "zero_charge"


class PriceBookState(StrEnum):
    """Lifecycle state of a PriceBook: Draft -> Announced -> Active -> Superseded -> Retired."""

    DRAFT = "Draft"
    ANNOUNCED = "Announced"
    ACTIVE = "Active"
    SUPERSEDED = "Superseded"
    RETIRED = "Retired"


Rate = Annotated[Decimal, MoneyField("rates values")]
MarkupPct = Annotated[Decimal, MoneyField("markupPct")]
DiscountPct = Annotated[Decimal, MoneyField("discountPct", at_most_100=True)]
MonthlyPrice = Annotated[Decimal, MoneyField("monthlyPrice")]
DIMENSIONS = KeysMatch(r"^[a-z][a-z0-9_]*$", 63, "rates keys are usage dimensions in snake_case (e.g. "
                       "prompt_tokens, completion_tokens, gpu_seconds)")
SkuName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
Unit = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Geo = Annotated[str, Field(max_length=63), KubeSchema(rules=(Rule(
    rule=f"self == '' || self.matches('{GEO_PATTERN}')",
    message="geo must be empty (every region) or a region name of lowercase letters, digits and '-'",
),))]


class PassThroughConfig(CamelModel):
    """Pass-through pricing: the upstream provider's cost plus a markup."""

    provider: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][-a-z0-9]*$")] = Field(
        description="Upstream provider name (e.g. openai, anthropic).")
    markup_pct: MarkupPct = Field(description='Markup percentage as a decimal string (e.g. "15.0" for 15%).')
    cost_secret_ref: LocalObjectReference = Field(description="Secret containing the provider's cost data.")


class SKU(CamelModel):
    """The rates of one model or product, optionally in one region."""

    sku: SkuName = Field(description="Model or product identifier (e.g. gpt-4o, llama-3-70b, h200-mig-3g.40gb).")
    unit: Unit = Field(description="Pricing unit (e.g. per-1M-tokens, per-gpu-second).")
    geo: Geo = Field(default="", description="Geographic region. Empty string = default for all regions.")
    rates: Annotated[dict[str, Rate], Field(min_length=1, max_length=32), DIMENSIONS] = Field(
        description="Maps usage dimensions (e.g. prompt_tokens, completion_tokens, cached_tokens, "
        "reasoning_tokens, requests, gpu_seconds) to decimal-string rates.")
    pass_through: PassThroughConfig | None = Field(
        default=None, description="Pass-through pricing derived from upstream costs plus markup.")


class VolumeTier(CamelModel):
    """A discount applied once monthly usage reaches a token count."""

    threshold_tokens: NonNegativeInt64 = Field(
        description="Monthly token count at which this tier activates. Min: 0.")
    discount_pct: DiscountPct = Field(description="Discount percentage as a decimal string (at most 100).")


class CommittedUseTier(CamelModel):
    """A fixed monthly price for committed throughput."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][-a-z0-9]*$")] = Field(
        description="Human-readable tier name (e.g. starter, growth, enterprise).")
    tokens_per_second: PositiveInt64 = Field(
        description="Committed throughput in tokens per second. Min: 1.")
    monthly_price: MonthlyPrice = Field(description="Fixed monthly price as a decimal string.")


class PriceBookSpec(CamelModel):
    """Desired state of a PriceBook."""

    currency: Currency = Field(description="ISO 4217 currency code.")
    effective_from: Time = Field(
        description="Timestamp when this PriceBook becomes Active. Must be >= creation + noticeDays (checked by "
        "the controller: a PriceBook without enough notice stays Draft).")
    notice_days: Annotated[Int32, Field(ge=0)] = Field(
        description="Minimum notice period (days) tenants receive before price changes take effect. Min: 0.")
    supersedes: ObjectName | None = Field(default=None, description="Name of the prior PriceBook this one replaces.")
    provider_fault_policy: ProviderFaultPolicy = Field(
        default=ProviderFaultPolicy.ZERO_CHARGE, description="Charging on upstream model error.")
    client_disconnect_policy: ClientDisconnectPolicy = Field(
        default=ClientDisconnectPolicy.BILL_PARTIAL, description="Charging on client disconnect mid-stream.")
    skus: Annotated[
        list[SKU], Field(min_length=1, max_length=256), KubeSchema(list_type="map", list_map_keys=("sku", "geo"))
    ] = Field(description="SKU pricing entries, at most one per (sku, geo). MinItems: 1.")
    volume_tiers: Annotated[
        list[VolumeTier], Field(max_length=32), KubeSchema(list_type="map", list_map_keys=("thresholdTokens",))
    ] | None = Field(default=None, description="Volume-based discount tiers applied to aggregate usage.")
    committed_use: Annotated[
        list[CommittedUseTier], Field(max_length=32), KubeSchema(list_type="map", list_map_keys=("name",))
    ] | None = Field(default=None, description="Committed-use pricing tiers for sustained throughput.")


class PriceBookStatus(CamelModel):
    """Observed state of a PriceBook."""

    state: PriceBookState | None = Field(default=None, description="Current lifecycle state.")
    active_tenants: Annotated[Int32, Field(ge=0)] | None = Field(
        default=None, description="Count of TenantAccounts currently using this PriceBook.")
    grandfathered_tenants: Annotated[list[str], Field(max_length=4096)] | None = Field(
        default=None, description="Tenant names pinned to this PriceBook via priceBookPin (not auto-migrated).")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(default=None, max_length=16, description="Standard Kubernetes conditions.")


FROZEN_STATES = ("Active", "Superseded", "Retired")
SPEC_FROZEN = Rule(
    rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in "
    f"{list(FROZEN_STATES)!r}) || self.spec == oldSelf.spec".replace('"', "'"),
    message="the spec of an Active, Superseded or Retired PriceBook cannot change: publish a new PriceBook "
    "that supersedes it",
    reason="FieldValueForbidden",
)
NOT_SELF = Rule(
    rule="!has(self.spec.supersedes) || self.spec.supersedes != self.metadata.name",
    message="a PriceBook cannot supersede itself",
)


class PriceBook(BillingObject):
    """Catalogue of SKU rates, volume discounts and committed-use tiers that govern how tenant usage is rated and
    invoiced, in force from effectiveFrom."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="pricebooks",
        short_names=("pb",),
        printer_columns=(
            PrinterColumn("State", ".status.state", description="Lifecycle state."),
            PrinterColumn("Effective", ".spec.effectiveFrom", "date", description="When it becomes Active."),
            PrinterColumn("Currency", ".spec.currency", description="ISO 4217 currency."),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
        root_rules=(SPEC_FROZEN, NOT_SELF),
    )

    kind: Literal["PriceBook"] = Field(default="PriceBook", description="Kind of the object.")
    spec: PriceBookSpec = Field(description="Currency, effective date, notice and rates.")
    status: PriceBookStatus | None = Field(default=None, description="Observed state, written by the controller.")
