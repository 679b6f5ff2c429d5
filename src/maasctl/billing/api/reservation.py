"""Reservation: calendar-committed GPU capacity with a window, a class and a fixed monthly price."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    Int32,
    PrinterColumn,
    Rule,
    model_rules,
)
from maasctl.billing.api._base import CATEGORY, GROUP, BillingObject
from maasctl.billing.api._types import MoneyField, ObjectName, Time

WINDOW_RULE = Rule(
    rule="self.end > self.start",
    message="window.end must be after window.start",
)


class ReservationClass(StrEnum):
    """Reservation tier."""

    GUARANTEED = "Guaranteed"
    PREEMPTIBLE = "Preemptible"


class ReservationState(StrEnum):
    """Lifecycle state of a Reservation."""

    REQUESTED = "Requested"
    CONFIRMED = "Confirmed"
    ACTIVE = "Active"
    EXPIRED = "Expired"
    CANCELLED = "Cancelled"


ReservationPrice = Annotated[Decimal, MoneyField("monthlyPrice")]


class ReservationWindow(CamelModel):
    """Start and end of the reservation."""

    model_config = ConfigDict(json_schema_extra=model_rules(WINDOW_RULE))

    start: Time = Field(description="Beginning of the reservation window.")
    end: Time = Field(description="End of the reservation window (after start).")


class ReservationSpec(CamelModel):
    """Desired state of a Reservation."""

    tenant_ref: ObjectName = Field(description="Name of the TenantAccount this reservation belongs to.")
    sku: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")] = Field(
        description="GPU product identifier (e.g. h200, h200-mig-3g.40gb). MinLength: 1.")
    count: Annotated[Int32, Field(ge=1)] = Field(description="Number of GPUs reserved. Min: 1.")
    geo: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = Field(
        description="Geographic region for this reservation.")
    window: ReservationWindow = Field(description="Start and end times of the reservation.")
    class_: ReservationClass = Field(
        alias="class",
        description="Guaranteed: capacity protected from preemption, billed regardless of utilisation. Preemptible: "
        "capacity may be reclaimed when Guaranteed demand exceeds supply.")
    monthly_price: ReservationPrice = Field(description="Fixed monthly price as a decimal string.")


class CapacityCheckResult(CamelModel):
    """Result of the most recent capacity feasibility check."""

    available: bool | None = Field(default=None, description="Whether sufficient capacity was found.")
    pool: Annotated[str, Field(max_length=253)] | None = Field(
        default=None, description="Capacity pool that satisfied the request.")


class ReservationStatus(CamelModel):
    """Observed state of a Reservation."""

    state: ReservationState | None = Field(default=None, description="Current lifecycle state.")
    cancelled_at: Time | None = Field(default=None, description="When the reservation was cancelled.")
    capacity_check: CapacityCheckResult | None = Field(default=None, description="Latest capacity check.")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(default=None, max_length=16, description="Standard Kubernetes conditions.")


class Reservation(BillingObject):
    """A calendar-committed GPU reservation with a time window, a capacity class (Guaranteed or Preemptible) and
    fixed monthly pricing."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="reservations",
        short_names=("rsv",),
        printer_columns=(
            PrinterColumn("State", ".status.state", description="Lifecycle state."),
            PrinterColumn("Class", ".spec.class", description="Guaranteed or Preemptible."),
            PrinterColumn("SKU", ".spec.sku", description="GPU product."),
            PrinterColumn("Count", ".spec.count", "integer", description="GPUs reserved."),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
    )

    kind: Literal["Reservation"] = Field(default="Reservation", description="Kind of the object.")
    spec: ReservationSpec = Field(description="Tenant, GPUs, region, window, class and price.")
    status: ReservationStatus | None = Field(default=None, description="Observed state.")
