"""The navigation: one list of sections, so a page is added by writing its router and one entry here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NavItem:
    label: str
    path: str
    admin: bool = False


USER_ITEMS = (
    NavItem("My Subscriptions", "/my/subscriptions"),
    NavItem("API Keys", "/keys"),
    NavItem("Models", "/models"),
)
ADMIN_ITEMS = (
    NavItem("Overview", "/admin/overview", admin=True),
    NavItem("Models", "/admin/models", admin=True),
    NavItem("Subscriptions", "/admin/subscriptions", admin=True),
    NavItem("Guardrails", "/admin/guardrails", admin=True),
    NavItem("Report", "/admin/report", admin=True),
)


def items(admin: bool) -> list[NavItem]:
    return [*USER_ITEMS, *(ADMIN_ITEMS if admin else ())]
