"""BillingConnector: how the psp-connector reaches a payment service provider."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from maasctl.api._base import AGE_COLUMN, CamelModel, Conditions, CrdInfo, Generation, PrinterColumn
from maasctl.api._fields import DNS_SUBDOMAIN_PATTERN
from maasctl.billing.api._base import CATEGORY, GROUP, BillingObject
from maasctl.billing.api._types import DURATION_PATTERN, LocalObjectReference, NonNegativeInt64, Time


class ConnectorType(StrEnum):
    """Payment service provider type."""

    STRIPE = "stripe"
    WEBHOOK = "webhook"


class TaxMode(StrEnum):
    """Who computes tax."""

    PSP = "psp"
    NONE = "none"


Interval = Annotated[str, Field(max_length=32, pattern=DURATION_PATTERN)]


class WebhookIngressConfig(CamelModel):
    """The publicly reachable endpoint for PSP webhook delivery."""

    host: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)] = Field(
        description="Publicly reachable hostname for webhook delivery.")
    tls_secret_ref: LocalObjectReference | None = Field(
        default=None, description="Secret containing TLS certificate and key for the webhook endpoint.")


class SyncConfig(CamelModel):
    """Polling intervals for usage and invoice sync (Gateway API duration format, e.g. 5m, 1h)."""

    usage_records_interval: Interval = Field(default="5m", description="Interval for pushing usage records to the PSP.")
    invoice_interval: Interval = Field(default="1h", description="Interval for syncing invoice state with the PSP.")


class BillingConnectorSpec(CamelModel):
    """Desired state of a BillingConnector."""

    type: ConnectorType = Field(description="Payment service provider type.")
    credentials_secret_ref: LocalObjectReference = Field(
        description="Secret containing PSP credentials. For Stripe: keys secretKey, webhookSecret. For webhook: key "
        "hmacSecret.")
    webhook_ingress: WebhookIngressConfig | None = Field(
        default=None, description="Publicly reachable endpoint for PSP webhook delivery.")
    sync: SyncConfig | None = Field(default=None, description="Polling intervals for usage and invoice sync.")
    tax_mode: TaxMode = Field(default=TaxMode.NONE, description="Tax computation delegation.")


class LastSyncStatus(CamelModel):
    """Result of the most recent sync."""

    at: Time | None = Field(default=None, description="Timestamp of the last sync.")
    pushed_records: NonNegativeInt64 | None = Field(default=None, description="Records pushed.")
    failed: NonNegativeInt64 | None = Field(default=None, description="Records that failed to push.")


class WebhookStatsStatus(CamelModel):
    """Webhook delivery statistics."""

    received24h: NonNegativeInt64 | None = Field(
        default=None, alias="received24h",  # to_camel would make it received24H
        description="Webhooks received in the last 24 hours.")
    signature_failures: NonNegativeInt64 | None = Field(
        default=None, description="Webhook signature verification failures in the last 24 hours.")


class BillingConnectorStatus(CamelModel):
    """Observed state of a BillingConnector."""

    connected: bool | None = Field(default=None, description="Whether the connector authenticated with the PSP.")
    last_sync: LastSyncStatus | None = Field(default=None, description="Result of the most recent sync operation.")
    webhook_stats: WebhookStatsStatus | None = Field(default=None, description="Webhook delivery statistics.")
    observed_generation: Generation | None = Field(
        default=None, description="Most recent generation observed by the controller.")
    conditions: Conditions | None = Field(default=None, max_length=16, description="Standard Kubernetes conditions.")


class BillingConnector(BillingObject):
    """Integration with a payment service provider (Stripe or a generic webhook) for the psp-connector."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="billingconnectors",
        short_names=("bconn",),
        printer_columns=(
            PrinterColumn("Type", ".spec.type", description="Payment service provider type."),
            PrinterColumn("Connected", ".status.connected", "boolean", description="Authenticated with the PSP."),
            AGE_COLUMN,
        ),
        categories=(CATEGORY,),
        group=GROUP,
    )

    kind: Literal["BillingConnector"] = Field(default="BillingConnector", description="Kind of the object.")
    spec: BillingConnectorSpec = Field(description="Provider, credentials, webhook ingress and sync intervals.")
    status: BillingConnectorStatus | None = Field(default=None, description="Observed state.")
