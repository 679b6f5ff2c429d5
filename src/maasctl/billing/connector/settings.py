"""Settings of `maasctl billing connector` (the psp-connector): one frozen object from flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["STRIPE_API", "ConnectorSettings"]

STRIPE_API: Final = "https://api.stripe.com"
"""Stripe's API; kept here, not in `providers`, so that parsing the command line imports no HTTP client."""


@dataclass(frozen=True, kw_only=True)
class ConnectorSettings:
    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()
    ledger_url: str = ""
    """The ledger's database (the one `maasctl billing run` writes): payments are credited there."""
    webhook_bind_address: str = ":8443"
    """Where the webhook receiver listens (POST /webhooks/<namespace>/<connector>), behind the Ingress the
    connector generates for `webhookIngress.host` (TLS from `tlsSecretRef`)."""
    stripe_api_base: str = STRIPE_API
    """Stripe's API (stripe-mock's URL in tests and `maasctl dev`)."""
    metrics_bind_address: str = ":8082"
    health_probe_bind_address: str = ":8083"
    leader_elect: bool = False
    leader_election_namespace: str = "opendatahub"
    leader_election_id: str = "psp-connector.billing.opendatahub.io"
    max_concurrent_reconciles: int = 4
    log_format: str = "auto"
    log_level: str = "info"
    reload_check_seconds: int = 10
    """How often each auto-reload tenant is looked at even without a change (balance changes also wake it)."""
    payment_method_cooldown_seconds: int = 3600
    """No auto-reload this long after `pspCustomerSecretRef` changes (a fresh card is not charged at once)."""
    reload_retry_seconds: int = 3600
    """After a failed payment, the next reload attempt waits this long (dunning retries are spaced out)."""
    resume_after_seconds: int = 30
    """A recorded attempt the PSP never answered (a crash, a timeout) is asked again, same idempotency key."""
    payment_method_check_seconds: int = 900
    """How long the PSP's answer about a payment method is trusted before asking again."""
    secret_check_seconds: int = 2
    """How often each BillingConnector's credentials Secret is read (GET) for changes: a rotated key takes effect
    within about this long (no list/watch on Secrets: see `ConnectorSecretsReconciler`)."""
    service_name: str = "psp-connector"
    """The connector's webhook Service, installed in `service_namespace`: the generated webhook Ingress of a
    BillingConnector of that namespace routes to it, one elsewhere to a generated ExternalName Service naming it
    (`rules.webhook_route`)."""
    service_port: int = 8443
    service_namespace: str = ""
    """The namespace the connector runs and its Service is in (the manifest passes the pod's own). Empty
    (unknown, e.g. `maasctl dev`): no Service is generated, each Ingress routes to `service_name` in its own
    namespace."""
