"""Settings of `maasctl billing run`: one frozen object built from flags (MAASCTL_* fallbacks), passed down."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BillingSettings"]


@dataclass(frozen=True, kw_only=True)
class BillingSettings:
    """Everything the billing controller needs; defaults match the in-cluster install."""

    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    leader_election_namespace: str = "opendatahub"
    leader_election_id: str = "billing-controller.billing.opendatahub.io"
    max_concurrent_reconciles: int = 2
    log_format: str = "auto"
    log_level: str = "info"
    gpu_flavor: str = "billing-gpu"
    """Kueue ResourceFlavor the per-tenant ClusterQueues draw nvidia.com/gpu from (created when missing)."""
    dependency_recheck_seconds: int = 15
    """How often a Plan is looked at again while Kuadrant's or Kueue's CRDs are missing."""
    ledger_url: str | None = None
    """The ledger's database; None: no wallets and no rating (Billing I behaviour)."""
    usage_database_url: str | None = None
    """maas-api's database (read-only) holding the usage records to rate; None: no rating."""
    rate_interval_seconds: int = 2
    """How often the rater looks for new usage records (it is also woken when a TenantAccount changes)."""
    rater_stall_seconds: int = 120
    """/readyz fails ("rater") when the rater has committed no page and finished no pass for this long."""
    balance_stale_seconds: int = 300
    """A balance mirror older than this (the ledger could not be read) is reported with BalanceStale."""
    wallet_resync_seconds: int = 60
    """How often every TenantAccount's status is refreshed from the ledger even without new usage."""
    ledger_watch_seconds: int = 1
    """How often the ledger is polled for new entries (a credit by any process): their tenants are refreshed."""
    budget_resync_seconds: int = 60
    """How often every BudgetPolicy is evaluated again even without new charges (the rater wakes it too)."""
    gpu_meter_seconds: int = 30
    """How often Kueue Workloads' GPU time is metered (also on every Workload change)."""
    gpu_segment_seconds: int = 3600
    """A running Workload's GPU time is charged in segments of at least this long (and when it ends)."""
    console_gateway_name: str = "maas-default-gateway"
    console_gateway_namespace: str = "openshift-ingress"
    """The Gateway the billing console's HTTPRoute attaches to where the OpenShift Route API is not served."""
    console_metrics_url: str | None = None
    """The billing operator's /metrics as the console reaches it (its metering health page); None: the
    billing-controller-metrics Service of the operator's namespace."""
    console_maas_api_url: str | None = None
    """maas-api as the console reaches it; None: the console's default."""
    portal_api_bind_address: str = "0"
    """Where the tenant portal's read API listens (`/portal/v1`, docs/billing-console.md); "0": not served (the
    install serves it on :8082)."""
    portal_subscription_namespace: str = "models-as-a-service"
    """The MaaS subscription namespace: its MaaSSubscriptions say who belongs to which tenant (the only
    namespace MaaS honours subscriptions in)."""
    console_api_url: str | None = None
    """This operator's portal API as the billing console reaches it; None: the billing-controller-api Service of
    the operator's namespace."""
    console_recheck_seconds: int = 30
    """How often the BillingConsole is looked at again for what is not watched: its OIDC client Secret (read
    by name) and whether the OpenShift Route API has appeared."""

    @property
    def console_namespace(self) -> str:
        """The billing console runs in the operator's own namespace (its Role there lets it write it)."""
        return self.leader_election_namespace
