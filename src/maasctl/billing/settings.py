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
