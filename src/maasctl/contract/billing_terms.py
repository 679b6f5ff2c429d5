"""What billing adds to a subscription's own limits: the Plan limits and the tenant state of its organization
on the Gateway it is used through. maas-api answers it to a subscription's users (`/v1/subscriptions`), the
console shows it to administrators (from the objects, with their own RBAC); both read it here.

The rule (docs/billing.md, "How a tenant meets MaaS"): a subscription's requests carry its organization id
(`organization.id`, else `tokenMetadata.organizationId`); the TenantAccount answering to that id (its label
`billing.opendatahub.io/organization-id`, else its name: the same rule as `billing.identity.tenant_id`, a test
keeps them equal) is its tenant; the tenant's Plan (`spec.planRef`, in the tenant's namespace) compiles its
limits onto its `targetRef`: a Gateway of the Plan's namespace (then they apply when that is the subscription's
Gateway) or an HTTPRoute (then on that route only). A Plan's limits count per tenant: every subscription and
user of the organization shares them. A Frozen, Suspended or Closed tenant is refused (403) on the Plan's
Gateway (`ENFORCED_STATES`, `billing.wallet.ENFORCED`).

Only what a subscriber may know of their own organization is carried: the tenant's name and state, the billing
mode, the Plan's name, limits and model scopes; never a balance, spend or payment detail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from maasctl.contract.limits import plan_limit_name

__all__ = ["ENFORCED_STATES", "ORGANIZATION_LABEL", "BillingTerms", "PlanLimit", "tenant_id", "terms_for"]

ORGANIZATION_LABEL: Final = "billing.opendatahub.io/organization-id"
ENFORCED_STATES: Final = frozenset({"Frozen", "Suspended", "Closed"})
_LIMITS: Final = (("requestsPerMinute", "requests", "1m"), ("tokensPerMinute", "tokens", "1m"),
                  ("tokensPerDay", "tokens", "24h"))


@dataclass(frozen=True, slots=True)
class PlanLimit:
    """One limit of a Plan: `kind` requests or tokens, `limit` per `window`; `name` is the limit a 429 names."""

    kind: str
    limit: int
    window: str
    name: str


@dataclass(frozen=True, slots=True)
class BillingTerms:
    """The billing tenant of a subscription's organization and its Plan, where they apply."""

    organization_id: str
    tenant: str
    tenant_namespace: str
    state: str | None  # None: the billing operator has not reported one yet
    billing_mode: str | None
    plan: str  # the tenant's planRef
    plan_found: bool
    limits: tuple[PlanLimit, ...] = ()
    model_scopes: tuple[str, ...] = ()  # globs of model names; empty: every model
    route: str | None = None  # the Plan targets this HTTPRoute (its limits apply there only)

    @property
    def enforced(self) -> bool:
        """The tenant's requests are refused (403) on the Plan's Gateway."""
        return self.state in ENFORCED_STATES


def tenant_id(tenant: Mapping[str, Any]) -> str:
    """The organization id a TenantAccount answers to: its organization label, else its name."""
    meta = tenant.get("metadata") or {}
    label = str((meta.get("labels") or {}).get(ORGANIZATION_LABEL) or "").strip()
    return label or str(meta.get("name") or "")


def _limits(plan: Mapping[str, Any], namespace: str, name: str) -> tuple[PlanLimit, ...]:
    limits = (plan.get("spec") or {}).get("limits") or {}
    out = []
    for field, kind, window in _LIMITS:
        value = limits.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            out.append(PlanLimit(kind, value, window, plan_limit_name(namespace, name, kind)))
    return tuple(out)


def terms_for(organization_id: str | None, gateway: str, tenants: Iterable[Mapping[str, Any]],
              plans: Iterable[Mapping[str, Any]]) -> tuple[BillingTerms, ...]:
    """The terms that apply to a subscription of `organization_id` used through `gateway` (`namespace/name`):
    one per TenantAccount of that organization whose Plan targets that Gateway or an HTTPRoute; a tenant whose
    Plan is missing is listed (its state still applies where its Plan would be), one whose Plan targets another
    Gateway is not. Sorted by tenant namespace and name."""
    if not organization_id:
        return ()
    by_key = {(str((p.get("metadata") or {}).get("namespace") or ""), str((p.get("metadata") or {}).get("name"))): p
              for p in plans}
    gw_namespace, _, gw_name = gateway.partition("/")
    out = []
    for tenant in tenants:
        if tenant_id(tenant) != organization_id:
            continue
        meta, spec, status = tenant.get("metadata") or {}, tenant.get("spec") or {}, tenant.get("status") or {}
        namespace, plan_name = str(meta.get("namespace") or ""), str((spec.get("planRef") or {}).get("name") or "")
        plan = by_key.get((namespace, plan_name))
        route = None
        if plan is not None:
            target = (plan.get("spec") or {}).get("targetRef") or {}
            if target.get("kind") == "HTTPRoute":
                route = str(target.get("name") or "")
            elif (namespace, str(target.get("name") or "")) != (gw_namespace, gw_name):
                continue  # the Plan (and the tenant's enforcement) is on another Gateway
        elif namespace != gw_namespace:
            continue  # no Plan to tell: a tenant is only ever in force next to its Gateway
        out.append(BillingTerms(
            organization_id=organization_id, tenant=str(meta.get("name") or ""), tenant_namespace=namespace,
            state=str(status["state"]) if status.get("state") else None,
            billing_mode=str(spec["billingMode"]) if spec.get("billingMode") else None,
            plan=plan_name, plan_found=plan is not None,
            limits=_limits(plan, namespace, plan_name) if plan is not None else (),
            model_scopes=tuple(str(s) for s in (plan.get("spec") or {}).get("modelScopes") or ())
            if plan is not None else (),
            route=route))
    return tuple(sorted(out, key=lambda t: (t.tenant_namespace, t.tenant)))
