"""Budget Throttle and Freeze through the Plan's compiled objects, evaluated by the local data plane exactly as it
composes the real Kuadrant policies with the MaaS route policy and the gateway default-deny: a frozen budget's
keys get 403 naming the budget; the tenant's other keys, another tenant's key carrying the same label and every
other denial are unaffected; a throttled budget's keys share one lowered token limit."""

from __future__ import annotations

import json
from typing import Any

import httpx

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.api.tenant import TenantState
from maasctl.billing.rules.budget import throttled_tokens_per_minute
from maasctl.billing.rules.compile import FAIL_CLOSED_RULE, BudgetAction, PlanInput, Tenant, compile_plan
from maasctl.billing.rules.wallet import denial_message
from maasctl.builders import authpolicy as maas_auth
from maasctl.builders.celcheck import check_cel
from maasctl.gateway.attachment import effective_policy
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import RequestInfo, compile_auth_policy
from maasctl.gateway.ratelimit import TokenRateLimiter, compile_token_rate_limit_policy

from .test_wallet_enforcement import DEFAULT_DENY, GW_NS, MODEL_NS, maas_route_policy, stamp

# key -> (user, subscription, labels)
KEYS: dict[str, tuple[str, str, dict[str, str] | None]] = {
    "sk-oai-rag": ("alice", "models-as-a-service/premium", {"project": "rag", "team": "ml"}),
    "sk-oai-plain": ("alice", "models-as-a-service/premium", {}),
    "sk-oai-almost": ("alice", "models-as-a-service/premium", {"project": "RAG"}),
    "sk-oai-legacy": ("alice", "models-as-a-service/premium", None),  # maas-api without labels in its answer
    "sk-oai-other": ("bob", "models-as-a-service/free", {"project": "rag"}),  # same label, another tenant
    "sk-oai-lost": ("carol", "models-as-a-service/gone", {"project": "rag"}),
}
ORGS = {"premium": "acme", "free": "other-org"}
FROZEN_TEXT = "billing budget maas-gateway/rag-budget of tenant ten-acme has frozen this API key: ..."


def callbacks(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/validate"):
        user, sub, labels = KEYS.get(body["key"], ("", "", None))
        answer: dict[str, Any] = {"valid": bool(user), "username": user, "groups": [], "keyId": body["key"],
                                  "subscription": sub}
        if labels is not None:
            answer["labels"] = labels
        return httpx.Response(200, json=answer)
    name = (body.get("keySubscription") or body["requestedSubscription"]).split("/")[-1]
    if name not in ORGS:
        return httpx.Response(200, json={"selected": False, "error": "not_found",
                                         "message": "subscription gone does not exist"})
    return httpx.Response(200, json={"selected": True, "name": name, "namespace": "models-as-a-service",
                                     "organizationId": ORGS[name]})


def compiled(*budgets: BudgetAction, tpm: int | None = 50_000, wallet_frozen: bool = False) -> dict[str, Any]:
    limits: dict[str, Any] = {"tokensPerMinute": tpm} if tpm else {"requestsPerMinute": 100}
    plan = parse(Plan, {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
                        "metadata": {"name": "basic", "namespace": GW_NS},
                        "spec": {"limits": limits, "targetRef": {"group": "gateway.networking.k8s.io",
                                                                 "kind": "Gateway", "name": "gw"}}})
    frozen = denial_message("ten-other", "other-org", TenantState.FROZEN)
    out = compile_plan(PlanInput(GW_NS, "basic", "uid", plan.spec,
                                 (Tenant("ten-acme", "acme"), Tenant("ten-other", "other-org",
                                                                     frozen if wallet_frozen else None)),
                                 denials=(("other-org", frozen),) if wallet_frozen else (),
                                 fallback_denial=(maas_auth.DENIAL_MESSAGE, maas_auth.DENIAL_REASON),
                                 budgets=budgets))
    for o in out.objects:
        check_cel(o)
    return {o["kind"]: stamp(o, f"plan-{o['kind']}", "2026-03-01T00:00:00Z") for o in out.objects}


FREEZE = BudgetAction("rag-budget", "acme", (("project", "rag"),), "Freeze", FROZEN_TEXT)
THROTTLE = BudgetAction("rag-budget", "acme", (("project", "rag"),), "Throttle")


async def decide(policy: dict[str, Any], key: str) -> Any:
    async def review(token: str, audiences: tuple[str, ...]) -> None:
        return None

    async with httpx.AsyncClient(transport=httpx.MockTransport(callbacks)) as http:
        runtime = AuthPolicyRuntime(http, review, callback_secret="gw", decision_cache=False)
        return await runtime.check(compile_auth_policy(policy), RequestInfo(
            "POST", f"/{MODEL_NS}/granite-8b/v1/chat/completions", "gw", {"authorization": f"Bearer {key}"}))


def effective(objs: dict[str, Any]) -> dict[str, Any]:
    out = effective_policy([DEFAULT_DENY, objs["AuthPolicy"]], [maas_route_policy()])
    assert out is not None
    return out


async def test_a_frozen_budget_refuses_its_keys_with_403_naming_it_and_nothing_else() -> None:
    policy = effective(compiled(FREEZE))
    denied = await decide(policy, "sk-oai-rag")
    assert not denied.allowed and denied.status == 403 and denied.message == FROZEN_TEXT
    assert denied.deny_headers["x-ext-auth-reason"] == "billing-budget-frozen"
    for key in ("sk-oai-plain", "sk-oai-almost", "sk-oai-legacy", "sk-oai-other"):
        assert (await decide(policy, key)).allowed, key
    lost = await decide(policy, "sk-oai-lost")  # another denial keeps MaaS's message
    assert not lost.allowed and lost.message == "subscription gone does not exist"
    assert lost.deny_headers["x-ext-auth-reason"] == "not_found"


async def test_a_budget_without_selector_freezes_the_whole_tenant() -> None:
    policy = effective(compiled(BudgetAction("all", "acme", (), "Freeze", "whole tenant frozen")))
    for key in ("sk-oai-rag", "sk-oai-plain", "sk-oai-legacy"):
        assert (await decide(policy, key)).message == "whole tenant frozen"
    assert (await decide(policy, "sk-oai-other")).allowed


async def test_a_frozen_budget_and_a_frozen_wallet_each_read_their_own_message() -> None:
    policy = effective(compiled(FREEZE, wallet_frozen=True))
    assert (await decide(policy, "sk-oai-rag")).message == FROZEN_TEXT
    other = await decide(policy, "sk-oai-other")
    assert not other.allowed and "ten-other" in other.message
    assert other.deny_headers["x-ext-auth-reason"] == "billing-tenant-blocked"


async def test_a_frozen_budget_of_another_plan_only_contributes_its_message() -> None:
    stranger = BudgetAction("theirs", "someone-else", (), "Freeze", "not ours")
    objs = compiled(stranger)
    rules = objs["AuthPolicy"]["spec"]["overrides"]["rules"]
    assert set(rules["authorization"]) == {FAIL_CLOSED_RULE} and "unauthorized" in rules["response"]
    assert (await decide(effective(objs), "sk-oai-rag")).allowed


async def test_nothing_in_force_compiles_to_the_plan_of_billing_ii() -> None:
    plain = compiled()
    rules = plain["AuthPolicy"]["spec"]["overrides"]["rules"]
    assert set(rules["authorization"]) == {FAIL_CLOSED_RULE} and "unauthorized" not in rules["response"]
    assert list(plain["TokenRateLimitPolicy"]["spec"]["overrides"]["limits"]) == [f"billing/{GW_NS}/basic/tokens"]
    assert "keyLabels" not in rules["response"]["success"]["filters"]["billing"]["json"]["properties"]


async def test_a_throttled_budget_lowers_its_keys_limit_together() -> None:
    objs = compiled(THROTTLE)
    policy = effective(objs)
    trlp = compile_token_rate_limit_policy(objs["TokenRateLimitPolicy"])
    limiter = TokenRateLimiter()
    path = {"url_path": f"/{MODEL_NS}/granite-8b/v1/chat/completions"}

    async def limits_of(key: str) -> list[Any]:
        outcome = await decide(policy, key)
        assert outcome.allowed, key
        return limiter.applicable(trlp, "llm/route", {"request": path, "auth": dict(outcome.filters)})

    rate = throttled_tokens_per_minute(50_000)
    rag = await limits_of("sk-oai-rag")
    assert len(rag) == 2  # the Plan's own limit and the budget's
    for key in ("sk-oai-plain", "sk-oai-almost", "sk-oai-legacy", "sk-oai-other"):
        assert len(await limits_of(key)) == 1, key  # only the Plan's limit
    await limiter.report(rag, rate + 1)  # spent past the throttled minute (as the wallet test does)
    assert await limiter.check(rag) is not None  # the budget's keys have used their throttled minute
    assert await limiter.check(await limits_of("sk-oai-plain")) is None  # the tenant's other keys are served
    # A second key minted with the label shares the same counter: more keys do not mean more tokens.
    KEYS["sk-oai-rag2"] = ("alice", "models-as-a-service/premium", {"project": "rag"})
    try:
        assert await limiter.check(await limits_of("sk-oai-rag2")) is not None
    finally:
        del KEYS["sk-oai-rag2"]


def test_label_values_cannot_break_out_of_the_generated_cel() -> None:
    evil = BudgetAction("b", 'acme" || true || "', (("p", '" || true || "'), ('x"]', "y")), "Freeze", 'msg"\\')
    compiled(evil, BudgetAction("b2", "acme", (("p", "q"),), "Throttle"))  # every CEL text compiles
