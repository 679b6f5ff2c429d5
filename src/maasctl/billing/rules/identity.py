"""How a request names its tenant, for the objects a Plan compiles to (see docs/billing.md, "Tenants").

A TenantAccount is the organisation that pays. It is matched by organization id: the value of its label
`billing.opendatahub.io/organization-id`, or else its name. A request carries the organization of the
MaaSSubscription it was charged to (`spec.organization.id`, falling back to `spec.tokenMetadata.organizationId`),
which maas-api returns at the top of its subscription selection answer (`auth.metadata.subscriptionInfo.organizationId`
inside the MaaS AuthPolicy; exported to rate limiting as `auth.identity.organization_id`).

Authorino evaluates authorization before it builds the response filters, so the two phases read the
organization from different places:

- AuthPolicy authorization (model scopes): `AUTHZ_TENANT`, the selection metadata itself;
- rate limiting (RateLimitPolicy/TokenRateLimitPolicy counters and predicates): `TENANT`, the dynamic metadata
  filter `billing.tenant` that every Plan AuthPolicy exports from the same metadata. Exporting it ourselves keeps
  the Plan's limits independent of the layout of the MaaS `identity` filter; its value is by construction the
  one MaaS exports as `auth.identity.organization_id`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from maasctl.contract import billing_terms
from maasctl.contract import identity as ids
from maasctl.contract.cel import cel_string, cel_string_list

__all__ = [
    "AUTHZ_KEY_LABELS",
    "AUTHZ_KEY_LABELS_OR_EMPTY",
    "AUTHZ_TENANT",
    "FILTER",
    "HAS_AUTHZ_TENANT",
    "HAS_TENANT",
    "KEY_LABELS",
    "TENANT",
    "authz_tenant_in",
    "key_labels_match",
    "tenant_id",
    "tenant_in",
]

_SELECTION: Final = f"auth.metadata.{ids.SUBSCRIPTION_INFO}"
AUTHZ_TENANT: Final = f"{_SELECTION}.{ids.INFO_ORGANIZATION}"
HAS_AUTHZ_TENANT: Final = f"has({_SELECTION}) && has({AUTHZ_TENANT})"

FILTER: Final = ids.BILLING
"""Name of the dynamic-metadata filter the Plan AuthPolicy exports (read as `auth.billing.*`)."""
TENANT: Final = f"auth.{FILTER}.{ids.BILLING_TENANT}"
HAS_TENANT: Final = f"has(auth.{FILTER}) && has({TENANT})"


_KEY: Final = "auth.metadata.apiKeyValidation"
AUTHZ_KEY_LABELS: Final = f"{_KEY}.labels"
"""The API key's labels (maas-api's validation answer; absent for Kubernetes tokens), authorization phase."""
_HAS_AUTHZ_KEY_LABELS: Final = f"has({_KEY}) && has({AUTHZ_KEY_LABELS})"
AUTHZ_KEY_LABELS_OR_EMPTY: Final = f"({_HAS_AUTHZ_KEY_LABELS}) ? {AUTHZ_KEY_LABELS} : {{}}"
KEY_LABELS: Final = f"auth.{FILTER}.{ids.BILLING_KEY_LABELS}"
"""The same labels exported by the Plan AuthPolicy's `billing` filter, for rate limiting."""


def key_labels_match(labels: str, selector: Iterable[tuple[str, str]]) -> str:
    """CEL: the map at `labels` (AUTHZ_KEY_LABELS or KEY_LABELS) carries every label of `selector`. A request
    without key labels (a token, or a key without them) never matches a non-empty selector."""
    owner = labels.rsplit(".", 1)[0]
    parts = [f"has({owner})", f"has({labels})"]
    for name, value in sorted(selector):
        parts.append(f"{cel_string(name)} in {labels} && {labels}[{cel_string(name)}] == {cel_string(value)}")
    return "(" + " && ".join(parts) + ")"


tenant_id = billing_terms.tenant_id
"""The organization id a TenantAccount object answers to: its organization label, else its name (the rule
maas-api shares, `contract.billing_terms`)."""


def tenant_in(ids: Iterable[str]) -> str:
    """CEL for rate limiting: the request's tenant is one of `ids`."""
    return f"{HAS_TENANT} && {TENANT} in {cel_string_list(sorted(set(ids)))}"


def authz_tenant_in(ids: Iterable[str]) -> str:
    """CEL for AuthPolicy authorization: the selected subscription's organization is one of `ids`."""
    return f"{HAS_AUTHZ_TENANT} && {AUTHZ_TENANT} in {cel_string_list(sorted(set(ids)))}"
