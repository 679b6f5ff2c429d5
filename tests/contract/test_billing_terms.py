"""How a subscription meets its organization's billing tenant and Plan (`contract.billing_terms`): pure."""

from __future__ import annotations

from typing import Any

import pytest

from maasctl.billing.api.tenant import TenantState
from maasctl.billing.rules import identity, wallet
from maasctl.contract.billing_terms import ENFORCED_STATES, ORGANIZATION_LABEL, PlanLimit, tenant_id, terms_for
from maasctl.contract.limits import describe_limit

GW = "maas-gw/maas-default-gateway"


def plan(name: str, ns: str = "maas-gw", target: tuple[str, str] = ("Gateway", "maas-default-gateway"),
         **limits: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"limits": limits, "targetRef": {"group": "gateway.networking.k8s.io", "kind": target[0],
                                                     "name": target[1]}}}


def tenant(name: str, plan_name: str, ns: str = "maas-gw", org: str | None = None, state: str | None = "Active",
           mode: str = "Prepaid") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if org is not None:
        meta["labels"] = {ORGANIZATION_LABEL: org}
    return {"metadata": meta, "spec": {"planRef": {"name": plan_name}, "billingMode": mode, "displayName": name},
            "status": {"state": state, "balance": "-3.000000", "mtdSpend": "10"} if state else {}}


def test_the_tenant_of_an_organization_and_its_plans_limits_on_the_subscriptions_gateway() -> None:
    plans = [plan("basic", requestsPerMinute=30, tokensPerMinute=20000, tokensPerDay=1_000_000,
                  maxConcurrency=4)]
    tenants = [tenant("ten-acme", "basic", org="acme", state="Frozen"), tenant("ten-helix", "basic", org="helix")]
    (terms,) = terms_for("acme", GW, tenants, plans)
    assert (terms.tenant, terms.tenant_namespace, terms.state, terms.billing_mode, terms.plan) == (
        "ten-acme", "maas-gw", "Frozen", "Prepaid", "basic")
    assert terms.enforced and terms.plan_found and terms.route is None and terms.model_scopes == ()
    assert terms.limits == (PlanLimit("requests", 30, "1m", "billing/maas-gw/basic/requests"),
                            PlanLimit("tokens", 20000, "1m", "billing/maas-gw/basic/tokens"),
                            PlanLimit("tokens", 1_000_000, "24h", "billing/maas-gw/basic/tokens"))
    # the names are the ones a 429 carries, and read as the Plan's
    assert describe_limit(terms.limits[0].name) == "the requests limit of billing Plan maas-gw/basic"
    assert "balance" not in repr(terms) and "-3.000000" not in repr(terms)  # nothing of the wallet but its state


@pytest.mark.parametrize(("org", "gateway", "expected"), [
    (None, GW, []), ("", GW, []),  # no organization: no tenant, showback only
    ("nobody", GW, []),
    ("acme", "other-ns/maas-default-gateway", []),  # the Plan is on another Gateway
    ("acme", "maas-gw/another", []),
    ("ten-named", GW, ["ten-named"]),  # no label: the name is the organization id
    ("helix", GW, ["ten-helix"]),
])
def test_which_tenants_apply(org: str | None, gateway: str, expected: list[str]) -> None:
    plans = [plan("basic", requestsPerMinute=1)]
    tenants = [tenant("ten-acme", "basic", org="acme"), tenant("ten-helix", "basic", org="helix"),
               tenant("ten-named", "basic"), tenant("helix", "basic", org="not-helix")]
    assert [t.tenant for t in terms_for(org, gateway, tenants, plans)] == expected


def test_a_route_plan_a_missing_plan_and_another_gateways_tenant() -> None:
    plans = [plan("per-route", target=("HTTPRoute", "gpt-x"), tokensPerDay=5, modelScopes=None),
             plan("elsewhere", ns="other-gw", requestsPerMinute=1)]
    plans[0]["spec"]["modelScopes"] = ["gpt-*"]
    tenants = [tenant("a", "per-route", org="acme"), tenant("b", "missing", org="acme", state=None),
               tenant("c", "elsewhere", ns="other-gw", org="acme"), tenant("d", "missing", ns="other-gw", org="acme")]
    a, b = terms_for("acme", GW, tenants, plans)
    assert (a.tenant, a.route, a.model_scopes, [x.window for x in a.limits]) == ("a", "gpt-x", ("gpt-*",), ["24h"])
    assert (b.tenant, b.plan_found, b.limits, b.state, b.enforced) == ("b", False, (), None, False)


def test_the_tenant_rule_and_the_enforced_states() -> None:
    """The billing operator takes both rules from here (one rule, two processes): a TenantAccount answers to its
    organization label, else its name; the enforced states are TenantAccount states."""
    assert [tenant_id(o) for o in (tenant("t", "p", org="acme"), tenant("t", "p"), tenant("t", "p", org="  "))] == [
        "acme", "t", "t"]
    assert identity.tenant_id is tenant_id
    assert {str(s) for s in wallet.ENFORCED} == ENFORCED_STATES
    assert {str(s) for s in TenantState} >= ENFORCED_STATES
