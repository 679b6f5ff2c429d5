"""The tenant portal's contract between the billing operator, which answers a tenant-scoped API over its ledger
and billing objects, and the console, which renders `/portal` and the billing pages' charts from it
(docs/billing-console.md, "The tenant portal"). The API reads, and writes one thing: a billing administrator's
credit to a tenant's wallet (`POST .../tenants/<ns>/<name>/credits`, below).

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

**Credits (the one write).** `POST {API_PREFIX}/tenants/<ns>/<name>/credits` with the JSON object
`{"id": ..., "amount": "25.00", "reason": ...}` adds `amount` to the tenant's wallet in the currency of its
PriceBook in force, recorded in the ledger as a credit (`credit:console-<id>`) with the caller as its actor. Who
may: whoever sees the tenant (else 404, as for reads) and whom the API server allows `create` on the virtual
subresource `tenantaccounts/credits` in the tenant's namespace (`CREDITS_SUBRESOURCE`; the billing console's
admin ClusterRole grants it), else 403. `id` is the client's idempotency id (`CREDIT_ID`: the console draws one
per rendered form): the same id with the same content is recorded once (200, `"duplicate": true`), with other
content refused (409). `amount` is a decimal string above zero, at most 6 decimals and at most
`MAX_CREDIT`; `reason` one line of 1 to `MAX_CREDIT_REASON` characters. Refusals: 400 naming the field, 409 when
the tenant has no PriceBook in force (its currency is unknown), 413 for a body above `MAX_CREDIT_BODY` bytes,
503 without a ledger. A wrong credit is never edited: it is undone by an adjustment (`maasctl billing ledger
adjust`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from maasctl.contract.billing_terms import tenant_id
from maasctl.contract.organizations import BROAD_GROUPS

__all__ = ["API_PREFIX", "CREDITS_SUBRESOURCE", "CREDIT_ID", "ENTRY_KINDS", "INVOICE_KEY", "LEDGER_SUBRESOURCE",
           "MAX_CREDIT", "MAX_CREDIT_BODY", "MAX_CREDIT_REASON", "MAX_PAGE", "SPEND_DAYS", "member_organizations",
           "spend_days", "tenants_of"]

API_PREFIX: Final = "/portal/v1"  # on the billing operator's API address (`--portal-api-bind-address`)
LEDGER_SUBRESOURCE: Final = "ledger"  # RBAC: get tenantaccounts/ledger = read any tenant's ledger
CREDITS_SUBRESOURCE: Final = "credits"  # RBAC: create tenantaccounts/credits = credit any tenant's wallet there
CREDIT_ID: Final = re.compile(r"\A[A-Za-z0-9_-]{16,64}\Z")
"""A credit's idempotency id as the client chooses it (`secrets.token_urlsafe(18)` is 24 of these characters)."""
MAX_CREDIT: Final = "1000000"
"""The largest credit the portal API takes, in the tenant's currency (a slip of the keyboard, not a policy: a larger
one is `maasctl billing ledger credit`'s)."""
MAX_CREDIT_REASON: Final = 500  # characters, one line
MAX_CREDIT_BODY: Final = 8192  # bytes of a credit's JSON (a reason of 500 characters, each escaped as \uXXXX\uXXXX)
MAX_PAGE: Final = 200  # ledger entries (or invoices) per page
INVOICE_KEY: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,399}\Z")  # an invoice in paths and cursors
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
