"""The billing console's contract between the billing operator, which deploys it from the BillingConsole
resource, and the console, which serves it: the flags the operator renders into the console's Deployment, and
the one rule that turns a signed-in user's groups into a billing role (docs/billing-console.md).

Roles, weakest first: `viewer` reads every billing page; `operator` also freezes and unfreezes tenants; `admin`
everything (PriceBook authoring, Plans and TenantAccounts). A user in the groups of several roles has the
strongest; a user in none has no billing role and sees no billing page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

__all__ = [
    "API_URL_FLAG",
    "CONSOLE_PORT",
    "ROLES",
    "ROLE_FLAGS",
    "TENANT_PORTAL_FLAG",
    "Role",
    "at_least",
    "cluster_role_name",
    "role_binding",
    "role_of",
]

Role = Literal["viewer", "operator", "admin"]
ROLES: Final[tuple[Role, ...]] = ("viewer", "operator", "admin")  # weakest first
# `maasctl console` flags (repeatable): the IdP groups of each role, as `spec.auth.roles` lists them.
ROLE_FLAGS: Final[Mapping[Role, str]] = {
    "admin": "--billing-admin-group",
    "operator": "--billing-operator-group",
    "viewer": "--billing-viewer-group",
}
TENANT_PORTAL_FLAG: Final = "--tenant-portal"  # present: the console serves /portal (tenantPortal.enabled)
API_URL_FLAG: Final = "--billing-api-url"  # the billing operator's portal API (contract.billing_portal)
CONSOLE_PORT: Final = 8080  # the container port of the deployed console


def role_of(groups: Iterable[str], roles: Mapping[Role, Iterable[str]]) -> Role | None:
    """The strongest role whose groups the user is in, else None (no billing page at all)."""
    mine = set(groups)
    best: Role | None = None
    for role in ROLES:
        if mine & set(roles.get(role) or ()):
            best = role
    return best


def at_least(role: Role | None, needed: Role) -> bool:
    """Whether `role` includes what `needed` may do (admin > operator > viewer; None: nothing)."""
    return role is not None and ROLES.index(role) >= ROLES.index(needed)


def cluster_role_name(role: Role) -> str:
    """The ClusterRole a role's users hold on the billing kinds (the console acts as them): shipped with the billing
    operator, bound by it to `spec.auth.roles`' groups (docs/billing-console.md, "Who may do what")."""
    return f"billing-console-{role}"


def role_binding(role: Role, groups: Iterable[str], metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ClusterRoleBinding of a role's ClusterRole to its groups (named like the role; `metadata` adds labels
    and owner references)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {**(metadata or {}), "name": cluster_role_name(role)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_role_name(role)},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]}
