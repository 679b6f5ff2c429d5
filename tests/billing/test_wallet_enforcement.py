"""Wallet enforcement through the Plan's compiled objects, evaluated by the local data plane exactly as it
composes the real Kuadrant policies: a Frozen tenant gets 403 naming the tenant, why and how to fix it; other
tenants and every other denial keep the MaaS behaviour; nothing changes while no tenant is denied; the tenant's
Kueue ClusterQueue stops admitting (Drain: Hold) or also evicts (Preempt: HoldAndDrain)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.api.tenant import BillingMode, TenantState
from maasctl.billing.controller.reconcilers.plan import allowance_of
from maasctl.billing.rules.compile import FAIL_CLOSED_RULE, PlanInput, Tenant, compile_plan
from maasctl.billing.rules.wallet import Policy, denial_message, epoch_allowance
from maasctl.builders import authpolicy as maas_auth
from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.refs import ObjectRef
from maasctl.gateway.attachment import effective_policy
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import RequestInfo, compile_auth_policy
from maasctl.gateway.counter_journal import CounterJournal
from maasctl.gateway.counters import CounterStore, MemoryCounterStore, RedisCounterStore
from maasctl.gateway.ratelimit import (
    CompiledTokenRateLimitPolicy,
    RateDenial,
    TokenRateLimiter,
    compile_token_rate_limit_policy,
)
from maasctl.testenv.redis import RedisServer

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


def compiled(*, frozen: bool, gpu: bool = False, mode: str = "Drain", allowance: tuple[tuple[str, int], ...] = ()
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
    assert set(rules["authorization"]) == {FAIL_CLOSED_RULE} and "unauthorized" not in rules["response"]
    effective = effective_policy([DEFAULT_DENY, policy], [maas_route_policy()])
    assert effective is not None
    assert (await decide(effective, "sk-oai-acme")).allowed


def test_a_frozen_tenants_cluster_queue_holds() -> None:
    acme, other = f"billing-{GW_NS}-ten-acme", f"billing-{GW_NS}-ten-other"
    drain = compiled(frozen=True, gpu=True)
    assert drain[acme]["spec"]["stopPolicy"] == "Hold" and "stopPolicy" not in drain[other]["spec"]
    assert compiled(frozen=True, gpu=True, mode="Preempt")[acme]["spec"]["stopPolicy"] == "HoldAndDrain"
    assert "stopPolicy" not in compiled(frozen=False, gpu=True)[acme]["spec"]


EPOCHS = (("2026-12-02", 0), ("2026-12-01", 0))
ACT = {"request": {"url_path": f"/{MODEL_NS}/granite-8b/v1/chat/completions"}, "auth": {"billing": {"tenant": "acme"}}}


def allowance_policy(caps: tuple[tuple[str, int], ...], generation: int = 1) -> CompiledTokenRateLimitPolicy:
    trlp = compiled(frozen=False, allowance=caps)["TokenRateLimitPolicy"]
    trlp["metadata"]["generation"] = generation  # as the API server counts each change
    return compile_token_rate_limit_policy(trlp)


def test_a_prepaid_tenant_gets_one_limit_per_allowance_epoch_without_headroom() -> None:
    assert "TokenRateLimitPolicy" not in compiled(frozen=False)  # no token limits, no allowance: none
    trlp = compiled(frozen=False, allowance=(("2026-12-02", 50), ("2026-12-01", 70)))["TokenRateLimitPolicy"]
    limits = trlp["spec"]["overrides"]["limits"]
    assert sorted(limits) == [f"billing/{GW_NS}/basic/allowance/ten-acme/2026-12-01",
                              f"billing/{GW_NS}/basic/allowance/ten-acme/2026-12-02"]
    current = limits[f"billing/{GW_NS}/basic/allowance/ten-acme/2026-12-02"]
    assert current["rates"] == [{"limit": 50, "window": "48h"}]  # the cap itself: no headroom in tokens
    assert current["counters"][1] == {"expression": '"allowance-2026-12-02"'}
    assert "TokenRateLimitPolicy" not in compiled(frozen=True, allowance=EPOCHS)  # denied: the deny rule decides
    limiter = TokenRateLimiter()
    policy = allowance_policy((("2026-12-02", 50),))
    assert len(limiter.applicable(policy, "llm/route", ACT)) == 1
    assert limiter.applicable(policy, "llm/route", {**ACT, "auth": {"billing": {"tenant": "other-org"}}}) == []


async def served(policy: CompiledTokenRateLimitPolicy, bound: int, n: int) -> int:
    """How many of `n` requests one after the other, each of `bound` tokens, a fresh limiter admits (as the
    seed's grace says, the request that crosses a cap completes; the next is refused)."""
    limiter = TokenRateLimiter()
    applied = limiter.applicable(policy, "llm/route", ACT)
    count = 0
    for _ in range(n):
        held = await limiter.reserve(applied, limiter.estimate(applied, bound))
        if not isinstance(held, RateDenial):
            await limiter.settle(held, applied, bound)
            count += 1
    return count


async def test_an_epoch_named_twice_is_enforced_at_its_lower_cap() -> None:
    twice = (("2026-12-02", 5000), ("2026-12-02", 50))
    limits = compiled(frozen=False, allowance=twice)["TokenRateLimitPolicy"]["spec"]["overrides"]["limits"]
    assert [lim["rates"] for lim in limits.values()] == [[{"limit": 50, "window": "48h"}]]
    assert await served(allowance_policy(twice), 10, 20) == await served(allowance_policy(twice[1:]), 10, 20) == 6
    assert await served(allowance_policy(twice[:1]), 10, 20) == 20


def tenant_status(caps: object) -> dict[str, Any]:
    return {"spec": {"billingMode": "Prepaid"}, "status": {"allowanceLimits": caps}}


@pytest.mark.parametrize("caps", [
    [{"epoch": "2026-12-02", "tokens": -5}], [{"epoch": "2026-12-02", "tokens": "5000"}],
    [{"epoch": "2026-12-02", "tokens": 1.5e9}], [{"epoch": "2026-12-02", "tokens": True}],
    [{"epoch": "yesterday", "tokens": 5000}], [{"epoch": "2026-12-02"}], "2026-12-02", [None],
    [{"epoch": "2026-12-02", "tokens": 5000}, {"epoch": "2026-12-02\n", "tokens": 5000}],
], ids=repr)
async def test_a_status_admission_should_have_refused_denies_the_tenant(caps: object) -> None:
    """Read by the Plan reconciler and enforced by the local data plane: a 0 cap, never no cap."""
    allowance = allowance_of(tenant_status(caps))
    assert allowance and min(tokens for _, tokens in allowance) == 0
    assert await served(allowance_policy(allowance), 10, 5) == 1  # the request that crosses the cap, no more
    other = {**ACT, "auth": {"billing": {"tenant": "other-org"}}}  # the Plan's other tenant is not affected
    assert TokenRateLimiter().applicable(allowance_policy(allowance), "llm/route", other) == []


async def test_only_a_prepaid_tenant_with_caps_gets_allowance_limits() -> None:
    caps = [{"epoch": "2026-12-02", "tokens": 50}]
    assert allowance_of(tenant_status(caps)) == (("2026-12-02", 50),)
    assert allowance_of({"spec": {"billingMode": "Invoiced"}, "status": {"allowanceLimits": caps}}) == ()
    assert allowance_of(tenant_status(None)) == ()  # nothing priced per token: the ledger's freeze bounds it
    assert await served(allowance_policy(allowance_of(tenant_status(caps))), 10, 20) == 6


PRICE = Decimal("0.02")  # a high-priced SKU: 20,000 per million tokens (8,192 tokens were 163.84 of headroom)
NO_GRACE = Policy(BillingMode.PREPAID)


async def burst(limiter: TokenRateLimiter, policy: CompiledTokenRateLimitPolicy, bound: int, n: int) -> int:
    """`n` concurrent requests, each reserving its bound and charged its bound (the worst case): tokens served."""
    applied = limiter.applicable(policy, "llm/route", ACT)
    served = 0

    async def one() -> None:
        nonlocal served
        held = await limiter.reserve(applied, limiter.estimate(applied, bound))
        if isinstance(held, RateDenial):
            return
        for _ in range(3):
            await asyncio.sleep(0)  # in flight while the others arrive
        await limiter.settle(held, applied, bound)
        served += bound

    await asyncio.gather(*(one() for _ in range(n)))
    return served


def caps_after(served: int, rated: int, balance: Decimal) -> tuple[tuple[str, int], ...]:
    """The caps the tenant reconciler publishes once the rater charged `rated` of the `served` tokens."""
    cap = epoch_allowance(NO_GRACE, balance - rated * PRICE, rated, PRICE)
    assert cap is not None and served >= rated
    return (("2026-12-02", cap),)


@pytest.mark.parametrize("bound", [15, 700, 4096])
@pytest.mark.parametrize("store", ["memory", "journaled", "redis"])
async def test_a_high_priced_burst_overspends_by_at_most_the_requests_in_flight(
        store: str, bound: int, tmp_path: Path, redis_server: RedisServer) -> None:
    """A 1.00 wallet at 0.02 a token, grace 0, and 500 concurrent calls: the wallet pays for at most what it
    holds plus the requests in flight when it crossed (here one: each reserves its own bound), whatever the
    price and however far the rater lags; a restart of the gateway (journaled counters) or the rater catching
    up and the cap being published again never admits more."""
    balance = Decimal("1.00")

    def open_store() -> CounterStore:
        if store == "redis":
            # 500 coroutines on one loop of a loaded machine can stall a connect past redis-py's 5 s: what is
            # measured here is the overspend, not Redis's latency
            return RedisCounterStore(redis_server.url, prefix=f"wallet-{tmp_path.name}:", socket_seconds=60)
        return MemoryCounterStore(journal=CounterJournal(tmp_path / "counters.jsonl") if store == "journaled"
                                  else None)

    limiter = TokenRateLimiter(open_store())
    try:
        first = caps_after(0, 0, balance)
        assert first == (("2026-12-02", 50),)
        served = await burst(limiter, allowance_policy(first), bound, 500)
        assert 0 < served * PRICE <= balance + bound * PRICE  # one request past the balance, never 549 calls
        if store != "memory":  # a gateway restart keeps the count (Redis, or the journal beside the spool)
            await limiter.store.aclose()
            limiter = TokenRateLimiter(open_store())
        for generation, rated in enumerate((0, served // 2, served), start=2):  # the rater lags, then catches up
            again = await burst(limiter, allowance_policy(caps_after(served, rated, balance), generation), bound, 50)
            assert again == 0, (rated, again)
    finally:
        await limiter.store.aclose()


