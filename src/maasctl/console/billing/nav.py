"""The billing section of the navigation: shown to users with a billing role only."""

from __future__ import annotations

from dataclasses import dataclass

from maasctl.console.billing.settings import BillingPagesSettings
from maasctl.console.nav import NavItem
from maasctl.console.sessions import Identity
from maasctl.contract.billing_console import Role

ITEMS = (
    NavItem("Tenants", "/billing/tenants"),
    NavItem("Budgets", "/billing/budgets"),
    NavItem("Reservations", "/billing/reservations"),
    NavItem("Connectors", "/billing/connectors"),
    NavItem("Metering health", "/billing/health"),
)


@dataclass(frozen=True)
class BillingNav:
    role: Role
    items: tuple[NavItem, ...] = ITEMS


def section(settings: BillingPagesSettings, identity: Identity | None) -> BillingNav | None:
    role = settings.role(identity.groups) if identity is not None else None
    return BillingNav(role) if role is not None else None
