"""The billing pages' settings (`maasctl console --billing-*-group`, `--billing-metrics-url`, `--tenant-portal`,
`--billing-api-url`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from maasctl.contract.billing_console import Role, role_of


@dataclass(frozen=True, kw_only=True)
class BillingPagesSettings:
    """Which groups hold which billing role; none: nobody sees a billing page."""

    admin_groups: tuple[str, ...] = ()
    operator_groups: tuple[str, ...] = ()
    viewer_groups: tuple[str, ...] = ()
    metrics_url: str | None = None  # the billing operator's /metrics (metering health)
    tenant_portal: bool = False
    api_url: str | None = None  # the billing operator's tenant portal API (contract.billing_portal)

    def role(self, groups: Iterable[str]) -> Role | None:
        return role_of(groups, {"admin": self.admin_groups, "operator": self.operator_groups,
                                "viewer": self.viewer_groups})
