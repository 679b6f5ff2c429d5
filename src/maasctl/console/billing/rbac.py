"""What the billing console's users need on the API server (the console acts as them): one ClusterRole per
billing role. The console's own role check decides what a page offers and refuses every write of a viewer; these
rules are what the API server checks in turn. The install ships them (manifests/base/billing/console-roles.yaml,
held equal to these by tests/billing/test_install.py) and the billing operator binds them to `spec.auth.roles`'
groups (docs/billing-console.md, "Who may do what"); without a BillingConsole, `role_bindings` does the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from maasctl.contract.billing_console import ROLES, Role, cluster_role_name, role_binding

GROUP: Final = "billing.opendatahub.io"
READ: Final = ["get", "list", "watch"]
_KINDS: Final = ["pricebooks", "plans", "tenantaccounts", "budgetpolicies", "reservations", "billingconnectors",
                 "billingconsoles"]
# The tenants' ledgers through the billing operator's portal API (a virtual subresource it checks by
# SubjectAccessReview: contract.billing_portal.LEDGER_SUBRESOURCE): the billing pages' charts.
_LEDGER: Final = {"apiGroups": [GROUP], "resources": ["tenantaccounts/ledger"], "verbs": ["get"]}
# A credit to a tenant's wallet through the portal API (contract.billing_portal.CREDITS_SUBRESOURCE): the tenant
# page's credit form. The published models and subscriptions: the walkthroughs' SKUs and an organization's check.
_CREDITS: Final = {"apiGroups": [GROUP], "resources": ["tenantaccounts/credits"], "verbs": ["create"]}
_MAAS: Final = {"apiGroups": ["maas.opendatahub.io"], "resources": ["maasmodelrefs", "maassubscriptions"],
                "verbs": ["get", "list"]}
RULES: Final[Mapping[Role, list[dict[str, Any]]]] = {
    # Every billing page, and the tenants' Events (their history).
    "viewer": [{"apiGroups": [GROUP], "resources": _KINDS, "verbs": READ}, _LEDGER,
               {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list"]}],
    # Freeze and unfreeze: a TenantAccount's annotations, and the Event recording who and why.
    "operator": [{"apiGroups": [GROUP], "resources": _KINDS, "verbs": READ}, _LEDGER,
                 {"apiGroups": [GROUP], "resources": ["tenantaccounts"], "verbs": ["patch"]},
                 {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "create"]}],
    # PriceBooks, Plans and TenantAccounts (authoring; the lifecycle rules are the API server's and controller's),
    # credits to wallets, and the MaaS models and subscriptions the walkthroughs read.
    "admin": [{"apiGroups": [GROUP], "resources": _KINDS, "verbs": READ}, _LEDGER,
              {"apiGroups": [GROUP], "resources": ["pricebooks", "plans", "tenantaccounts", "budgetpolicies"],
               "verbs": ["create", "update", "patch", "delete"]},
              {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "create"]},
              _CREDITS, _MAAS],
}


def cluster_roles() -> list[dict[str, Any]]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": cluster_role_name(r)}, "rules": RULES[r]} for r in ROLES]


def role_bindings(groups: Mapping[Role, Sequence[str]]) -> list[dict[str, Any]]:
    """One ClusterRoleBinding per role with groups (what the billing operator does from a BillingConsole)."""
    return [role_binding(role, gs) for role, gs in groups.items() if gs]
