"""The tenant portal's contract between the billing operator, which answers a tenant-scoped read API over its
ledger and billing objects, and the console, which renders `/portal` from it (docs/billing-console.md, "The
tenant portal").

**Who belongs to a tenant (decided).** A signed-in user is a member of organization X when a MaaSSubscription
*in the subscription namespace* (the only one MaaS honours) with `spec.organization.id` X names the user in
`spec.owner.users`, or one of the user's groups in `spec.owner.groups`, as the API server reports them
(TokenReview). The user's tenants are the TenantAccounts answering to those organizations
(`billing_terms.tenant_id`: the organization label, else the name). Deliberately not counted:

- `*` and the groups that hold everyone (`organizations.BROAD_GROUPS`): a subscription everybody may use does
  not make everybody a member of the organization that pays for it;
- `tokenMetadata.organizationId`: it attributes usage but can be changed at any time, so it delegates nothing
  (the rule of docs/organizations.md); `organization.id` is set once and never changed;
- subscriptions in any other namespace: whoever may create one in their own namespace could otherwise name
  themselves owner of any organization;
- subscriptions being deleted.

A reader (the billing console's roles) reads any tenant's ledger when the API server allows them `get` on the
virtual subresource `tenantaccounts/ledger` in the tenant's namespace (`LEDGER_SUBRESOURCE`; the billing console
ClusterRoles grant it). Anyone else asking for a tenant gets 404, exactly as for a tenant that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from maasctl.contract.billing_terms import tenant_id
from maasctl.contract.organizations import BROAD_GROUPS

__all__ = ["API_PREFIX", "ENTRY_KINDS", "LEDGER_SUBRESOURCE", "MAX_PAGE", "SPEND_DAYS", "member_organizations",
           "spend_days", "tenants_of"]

API_PREFIX: Final = "/portal/v1"  # on the billing operator's API address (`--portal-api-bind-address`)
LEDGER_SUBRESOURCE: Final = "ledger"  # RBAC: get tenantaccounts/ledger = read any tenant's ledger
MAX_PAGE: Final = 200  # ledger entries per page
SPEND_DAYS: Final = (7, 30, 90)  # the spend charts' ranges (days, ending today, UTC)
ENTRY_KINDS: Final = ("usage", "credit", "adjustment", "payment", "commitment", "reservation")
_EVERYONE: Final = BROAD_GROUPS | {"*"}


def spend_days(text: str | None) -> int | None:
    """The spend range a query's `days` names, exactly as written ("7", "30", "90"); anything else (other digits,
    another script's digits, thousands of them, signs, blanks) names none: the API answers 400, the pages show 30."""
    return next((d for d in SPEND_DAYS if text == str(d)), None)


def _names(entries: Any) -> set[str]:
    """`owner.users` is a list of names; `owner.groups` a list of {name}; tolerate either shape."""
    out = set()
    for entry in entries or ():
        name = entry.get("name") if isinstance(entry, Mapping) else entry
        if isinstance(name, str) and name and name not in _EVERYONE:
            out.add(name)
    return out


def member_organizations(username: str, groups: Iterable[str], subscriptions: Iterable[Mapping[str, Any]],
                         namespace: str) -> frozenset[str]:
    """The organizations `username` (with `groups`) belongs to: see the module docstring."""
    if not username:
        return frozenset()
    mine = set(groups) - _EVERYONE
    out = set()
    for sub in subscriptions:
        meta, spec = sub.get("metadata") or {}, sub.get("spec") or {}
        if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
            continue
        org = (spec.get("organization") or {}).get("id")
        if not isinstance(org, str) or not org:
            continue
        owner = spec.get("owner") or {}
        if username in _names(owner.get("users")) or mine & _names(owner.get("groups")):
            out.add(org)
    return frozenset(out)


def tenants_of(organizations: frozenset[str], tenants: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """`(namespace, name)` of every TenantAccount answering to one of `organizations`, sorted."""
    return sorted((str((t.get("metadata") or {}).get("namespace") or ""), str((t.get("metadata") or {}).get("name")))
                  for t in tenants if organizations and tenant_id(t) in organizations)
