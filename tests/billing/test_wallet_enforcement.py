"""Wallet enforcement through the Plan's compiled objects, evaluated by the local data plane exactly as it
composes the real Kuadrant policies: a Frozen tenant gets 403 naming the tenant, why and how to fix it; other
tenants and every other denial keep the MaaS behaviour; nothing changes while no tenant is denied; the tenant's
Kueue ClusterQueue stops admitting (Drain: Hold) or also evicts (Preempt: HoldAndDrain)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import httpx

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.api.tenant import TenantState
from maasctl.billing.compile import ALLOWANCE_HEADROOM, PlanInput, Tenant, compile_plan
from maasctl.billing.wallet import allowance_bucket, denial_message
from maasctl.builders import authpolicy as maas_auth
from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.refs import ObjectRef
from maasctl.gateway.attachment import effective_policy
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import RequestInfo, compile_auth_policy
from maasctl.gateway.ratelimit import TokenRateLimiter, compile_token_rate_limit_policy

GW_NS, MODEL_NS = "maas-gateway", "llm"


def stamp(obj: dict[str, Any], uid: str, created: str) -> dict[str, Any]:
    obj["metadata"] |= {"uid": uid, "generation": 1, "creationTimestamp": created}
    return obj


def maas_route_policy(model: str = "granite-8b") -> dict[str, Any]:
    obj = build_auth_policy(
        AuthPolicyInput(ObjectRef(MODEL_NS, model), ObjectRef(MODEL_NS, f"{model}-route"),
                        (AuthPolicySource(ObjectRef("models-as-a-service", "all"), users=("*",)),)),
        AuthSettings("http://maas-api.test:8080", cache_ttl_seconds=0))
    assert obj is not None
    return stamp(obj, "maas", "2026-01-01T00:00:00Z")


DEFAULT_DENY = stamp({
    "apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy",
    "metadata": {"name": "maas-gateway-auth", "namespace": GW_NS},
    "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
             "defaults": {"rules": {"authorization": {"deny-all": {"patternMatching": {"patterns": [
                 {"predicate": "false"}]}}}}}},
}, "deny", "2026-02-01T00:00:00Z")

KEYS = {"sk-oai-acme": ("alice", "models-as-a-service/premium"), "sk-oai-other": ("bob", "models-as-a-service/free"),
        "sk-oai-lost": ("carol", "models-as-a-service/gone")}
ORGS = {"premium": "acme", "free": "other-org"}
FROZEN = denial_message("ten-acme", "acme", TenantState.FROZEN)


def callbacks(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/validate"):
        user, sub = KEYS.get(body["key"], ("", ""))
        return httpx.Response(200, json={"valid": bool(user), "username": user, "groups": [], "keyId": "k",
                                         "subscription": sub})
    name = (body.get("keySubscription") or body["requestedSubscription"]).split("/")[-1]
    if name not in ORGS:
        return httpx.Response(200, json={"selected": False, "error": "not_found",
                                         "message": "subscription gone does not exist"})
    # The organization at the top of the answer and under `subscription` (both layouts maas-api has used).
    return httpx.Response(200, json={"selected": True, "name": name, "namespace": "models-as-a-service",
                                     "organizationId": ORGS[name], "subscription": {"organizationId": ORGS[name]}})


def compiled(*, frozen: bool, gpu: bool = False, mode: str = "Drain", allowance: int | None = None
             ) -> dict[str, dict[str, Any]]:
    """The Plan's objects by kind (ClusterQueues by name)."""
    limits: dict[str, Any] = {"requestsPerMinute": 100, **({"gpuQuota": 1} if gpu else {})}
    spec = {"limits": limits, "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}
    plan = parse(Plan, {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
                        "metadata": {"name": "basic", "namespace": GW_NS}, "spec": spec})
    acme = Tenant("ten-acme", "acme", FROZEN if frozen else None, mode, allowance)
    out = compile_plan(PlanInput(GW_NS, "basic", "uid", plan.spec, (acme, Tenant("ten-other", "other-org")),
                                 denials=(("acme", FROZEN),) if frozen else (),
                                 fallback_denial=(maas_auth.DENIAL_MESSAGE, maas_auth.DENIAL_REASON)))
    return {o["metadata"]["name"] if o["kind"] == "ClusterQueue" else o["kind"]:
            stamp(o, f"plan-{o['kind']}", "2026-03-01T00:00:00Z") for o in out.objects}


async def decide(policy: Mapping[str, Any], key: str) -> Any:
    async def review(token: str, audiences: tuple[str, ...]) -> None:
        return None

    async with httpx.AsyncClient(transport=httpx.MockTransport(callbacks)) as http:
        runtime = AuthPolicyRuntime(http, review, callback_secret="gw", decision_cache=False)
        return await runtime.check(compile_auth_policy(policy), RequestInfo(
            "POST", f"/{MODEL_NS}/granite-8b/v1/chat/completions", "gw", {"authorization": f"Bearer {key}"}))


async def test_a_frozen_tenant_gets_403_naming_it_and_the_fix_others_are_unaffected() -> None:
    effective = effective_policy([DEFAULT_DENY, compiled(frozen=True)["AuthPolicy"]], [maas_route_policy()])
    assert effective is not None
    denied = await decide(effective, "sk-oai-acme")
    assert not denied.allowed and denied.status == 403
    assert denied.message == FROZEN
    assert "ten-acme" in denied.message and "Frozen" in denied.message and "credited" in denied.message
    assert denied.deny_headers["x-ext-auth-reason"] == "billing-tenant-blocked"
    other = await decide(effective, "sk-oai-other")
    assert other.allowed and other.filters["billing"] == {"tenant": "other-org"}
    # Any other denial keeps MaaS's own message and reason.
    lost = await decide(effective, "sk-oai-lost")
    assert not lost.allowed and lost.status == 403
    assert lost.message == "subscription gone does not exist"
    assert lost.deny_headers["x-ext-auth-reason"] == "not_found"


async def test_the_route_policy_order_does_not_matter() -> None:
    plan = compiled(frozen=True)["AuthPolicy"]
    newer = dict(plan, metadata={**plan["metadata"], "creationTimestamp": "2025-01-01T00:00:00Z"})
    effective = effective_policy([newer], [maas_route_policy()])
    assert effective is not None
    assert (await decide(effective, "sk-oai-acme")).message == FROZEN


async def test_unfrozen_the_policy_is_the_billing_i_policy_and_the_tenant_is_served() -> None:
    policy = compiled(frozen=False)["AuthPolicy"]
    rules = policy["spec"]["overrides"]["rules"]
    assert "authorization" not in rules and "unauthorized" not in rules["response"]
    effective = effective_policy([DEFAULT_DENY, policy], [maas_route_policy()])
    assert effective is not None
    assert (await decide(effective, "sk-oai-acme")).allowed


def test_a_frozen_tenants_cluster_queue_holds() -> None:
    acme, other = f"billing-{GW_NS}-ten-acme", f"billing-{GW_NS}-ten-other"
    drain = compiled(frozen=True, gpu=True)
    assert drain[acme]["spec"]["stopPolicy"] == "Hold" and "stopPolicy" not in drain[other]["spec"]
    assert compiled(frozen=True, gpu=True, mode="Preempt")[acme]["spec"]["stopPolicy"] == "HoldAndDrain"
    assert "stopPolicy" not in compiled(frozen=False, gpu=True)[acme]["spec"]


async def test_a_prepaid_allowance_bounds_spend_between_ledger_updates() -> None:
    assert allowance_bucket(Decimal("65000")) == 32768 and allowance_bucket(Decimal("0.5")) is None
    assert "TokenRateLimitPolicy" not in compiled(frozen=False)  # no token limits, no allowance: none
    trlp = compiled(frozen=False, allowance=32768)["TokenRateLimitPolicy"]
    limits = trlp["spec"]["overrides"]["limits"]
    assert list(limits) == [f"billing/{GW_NS}/basic/allowance/ten-acme"]
    assert limits[f"billing/{GW_NS}/basic/allowance/ten-acme"]["rates"] == [
        {"limit": 32768 + ALLOWANCE_HEADROOM, "window": "24h"}]
    assert "TokenRateLimitPolicy" not in compiled(frozen=True, allowance=32768)  # denied: the deny rule decides

    limiter = TokenRateLimiter()
    act = {"request": {"url_path": f"/{MODEL_NS}/granite-8b/v1/chat/completions"},
           "auth": {"billing": {"tenant": "acme"}}}
    policy = compile_token_rate_limit_policy(trlp)
    applied = limiter.applicable(policy, "llm/route", act)
    assert len(applied) == 1
    assert limiter.applicable(policy, "llm/route", {**act, "auth": {"billing": {"tenant": "other-org"}}}) == []
    await limiter.report(applied, 32768 + ALLOWANCE_HEADROOM + 1)  # spent past the allowance before the ledger
    assert await limiter.check(applied) is not None  # moved: refused
    # The ledger catches up and publishes a new allowance: a fresh count, not the tokens already charged.
    changed = compiled(frozen=False, allowance=16384)["TokenRateLimitPolicy"]
    changed["metadata"]["generation"] = 2  # as the API server counts the change
    fresh = compile_token_rate_limit_policy(changed)
    assert await limiter.check(limiter.applicable(fresh, "llm/route", act)) is None
