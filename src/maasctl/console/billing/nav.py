"""The billing section of the navigation: shown to users with a billing role only; the tenant portal's link to
every signed-in user when the portal is served."""

from __future__ import annotations

from dataclasses import dataclass

from maasctl.console.billing.settings import BillingPagesSettings
from maasctl.console.nav import NavItem
from maasctl.console.sessions import Identity
from maasctl.contract.billing_console import Role

ITEMS = (
    NavItem("Tenants", "/billing/tenants"),
    NavItem("PriceBooks", "/billing/pricebooks"),
    NavItem("Plans", "/billing/plans"),
    NavItem("Budgets", "/billing/budgets"),
    NavItem("Reservations", "/billing/reservations"),
    NavItem("Connectors", "/billing/connectors"),
    NavItem("Metering health", "/billing/health"),
)


@dataclass(frozen=True)
class BillingNav:
    role: Role | None
    items: tuple[NavItem, ...] = ITEMS
    portal: bool = False


def section(settings: BillingPagesSettings, identity: Identity | None) -> BillingNav | None:
    if identity is None:
        return None
    role = settings.role(identity.groups)
    return BillingNav(role, portal=settings.tenant_portal) if role is not None or settings.tenant_portal else None
