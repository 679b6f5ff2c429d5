"""How a Plan's compiled policies compose with the MaaS policies on the local data plane, following Kuadrant's
defaults/overrides and merge strategies (gateway/attachment.py), evaluated by the gateway's own Authorino and
Limitador stand-ins. maas-api's callbacks and the TokenReview are answered in-process.

The rule (issue 37, docs/billing.md "Fail closed"): composing billing policies keeps the MaaS answers - 401 only
for no credential or a token nobody accepts, 403 for a credential the route's policy does not admit (an API key
maas-api refuses included, as in the reference), served only where the MaaS policy serves - on routes a
MaaSAuthPolicy covers and routes only the gateway's default-deny covers, whichever gateway policy is newer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.rules.compile import PlanInput, Tenant, compile_plan
from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.gatewayauth import build_gateway_default_auth
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.gateway.attachment import effective_policy, rules_of
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import RequestInfo, compile_auth_policy
from maasctl.gateway.counters import MemoryCounterStore
from maasctl.gateway.requestlimit import RequestLimiter, compile_rate_limit_policy
from maasctl.runtime import freeze

ROOT = Path(__file__).resolve().parents[2]
GW_NS, MODEL_NS = "maas-gateway", "llm"
KEYS = {"sk-oai-acme": ("alice", "models-as-a-service/premium"), "sk-oai-other": ("bob", "models-as-a-service/free")}
ORGS = {"premium": "acme", "free": "other-org"}


def stamp(obj: dict[str, Any], uid: str, created: str) -> dict[str, Any]:
    obj["metadata"] |= {"uid": uid, "generation": 1, "creationTimestamp": created}
    return obj


def maas_route_policy(model: str = "granite-8b", users: tuple[str, ...] = ("*",)) -> dict[str, Any]:
    obj = build_auth_policy(
        AuthPolicyInput(ObjectRef(MODEL_NS, model), ObjectRef(MODEL_NS, f"{model}-route"),
                        (AuthPolicySource(ObjectRef("models-as-a-service", "all"), users=users),)),
        AuthSettings("http://maas-api.test:8080", cache_ttl_seconds=0))
    assert obj is not None
    return stamp(obj, "maas", "2026-01-01T00:00:00Z")


def plan_objects(**limits: Any) -> dict[str, dict[str, Any]]:
    spec = {"limits": limits, "modelScopes": ["granite-*"],
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}
    plan = parse(Plan, {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
                        "metadata": {"name": "basic", "namespace": GW_NS}, "spec": spec})
    compiled = compile_plan(PlanInput(GW_NS, "basic", "plan-uid", plan.spec, (Tenant("ten-acme", "acme"),)))
    return {o["kind"]: stamp(o, f"plan-{o['kind']}", "2026-03-01T00:00:00Z") for o in compiled.objects}


DEFAULT_DENY = stamp(build_gateway_default_auth(GatewayRef(GW_NS, "gw")), "deny", "2026-02-01T00:00:00Z")
"""The controller's own default-deny, older than the Plan's policies: the hard case (see docs/billing.md)."""
TOKENS = {"alice-token": "alice", "carol-token": "carol"}  # Kubernetes tokens the TokenReview accepts


def callbacks(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/validate"):
        user, sub = KEYS.get(body["key"], ("", ""))
        return httpx.Response(200, json={"valid": bool(user), "username": user, "groups": [], "keyId": "k",
                                         "subscription": sub})
    name = (body["keySubscription"] or body["requestedSubscription"] or "premium").split("/")[-1]
    return httpx.Response(200, json={"selected": True, "name": name, "namespace": "models-as-a-service",
                                     "organizationId": ORGS[name]})


async def token_review(token: str, audiences: tuple[str, ...]) -> dict[str, Any] | None:
    user = TOKENS.get(token)
    return {"authenticated": True, "user": {"username": user, "groups": []}} if user else None


async def decide(policy: Mapping[str, Any], key: str | None, model: str = "granite-8b") -> Any:
    async with httpx.AsyncClient(transport=httpx.MockTransport(callbacks)) as http:
        runtime = AuthPolicyRuntime(http, token_review, callback_secret="gw", decision_cache=False)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return await runtime.check(compile_auth_policy(policy),
                                   RequestInfo("POST", f"/{MODEL_NS}/{model}/v1/chat/completions", "gw", headers))


async def test_on_a_model_route_the_plan_adds_its_scope_rule_and_tenant_to_the_maas_policy() -> None:
    plan = plan_objects(requestsPerMinute=2)["AuthPolicy"]
    # As the gateway's informer cache holds them: frozen.
    effective = effective_policy([freeze(DEFAULT_DENY), freeze(plan)], [freeze(maas_route_policy())])
    assert effective is not None
    keys = set(rules_of(effective))
    assert {"authentication#api-keys", "metadata#subscriptionInfo", "authorization#subscription-selected",
            f"authorization#billing-plan-{GW_NS}-basic", "response.success.metadata#identity",
            "response.success.metadata#billing"} <= keys
    assert "authorization#deny-uncovered-routes" not in keys  # the route's own policy beats the gateway defaults
    allowed = await decide(effective, "sk-oai-acme")
    assert allowed.allowed, allowed.reason
    assert allowed.filters["billing"] == {"tenant": "acme"}
    assert allowed.filters["identity"]["userid"] == "alice"


async def test_a_tenant_outside_its_model_scopes_gets_403_and_other_tenants_are_not_affected() -> None:
    plan = plan_objects(requestsPerMinute=2)["AuthPolicy"]
    effective = effective_policy([DEFAULT_DENY, plan], [maas_route_policy("gpt-x")])
    assert effective is not None
    denied = await decide(effective, "sk-oai-acme", model="gpt-x")
    assert not denied.allowed and denied.status == 403 and f"billing-plan-{GW_NS}-basic" in denied.reason
    other = await decide(effective, "sk-oai-other", model="gpt-x")
    assert other.allowed and other.filters["billing"] == {"tenant": "other-org"}


CREDENTIALS: dict[str, tuple[str | None, int, int]] = {
    # name: (bearer credential, answer on a model route that admits alice, answer on a route nothing covers)
    "valid key": ("sk-oai-acme", 200, 403),
    "invalid key": ("sk-oai-forged", 403, 403),  # maas-api refuses it: 403, as the reference answers
    "no credential": (None, 401, 401),
    "valid token": ("alice-token", 200, 403),
    "valid token, not entitled": ("carol-token", 403, 403),
    "invalid token": ("not-a-token", 401, 401),
}


def gateway_policies(plans: str) -> list[dict[str, Any]]:
    """The Gateway's AuthPolicies: the default-deny, and the Plan's created after it or before it."""
    if plans == "none":
        return [DEFAULT_DENY]
    plan = plan_objects(requestsPerMinute=2)["AuthPolicy"]
    plan["metadata"]["creationTimestamp"] = "2026-03-01T00:00:00Z" if plans == "plan newer" else "2026-01-01T00:00:00Z"
    return [DEFAULT_DENY, plan]


@pytest.mark.parametrize("plans", ["none", "plan newer", "plan older"])
@pytest.mark.parametrize("credential", list(CREDENTIALS))
async def test_a_plan_keeps_the_maas_answers_on_granted_and_ungranted_routes(plans: str, credential: str) -> None:
    """Without a route policy Kuadrant keeps whichever gateway policy wins (the Plan's alone when it is newer);
    with one, the Plan is merged into it. Either way each caller reads what it reads without Plans."""
    bearer, granted, ungranted = CREDENTIALS[credential]
    for route, expected in (([maas_route_policy(users=("alice", "bob"))], granted), ([], ungranted)):
        effective = effective_policy(gateway_policies(plans), route)
        assert effective is not None
        outcome = await decide(effective, bearer, model="granite-8b" if route else "granite-closed")
        assert (outcome.status, outcome.allowed) == (expected, expected == 200), (route != [], outcome)


@pytest.mark.parametrize("plans", ["none", "plan newer", "plan older"])
async def test_a_simulated_user_is_refused_where_that_users_token_would_be(plans: str) -> None:
    """`maasctl simulate --user` skips authentication: the identity is taken as the route's TokenReview entry
    would establish it, so a Plan standing alone on an uncovered route refuses the simulation too."""
    effective = effective_policy(gateway_policies(plans), [])
    assert effective is not None
    async with httpx.AsyncClient(transport=httpx.MockTransport(callbacks)) as http:
        runtime = AuthPolicyRuntime(http, lambda token, audiences: None,  # type: ignore[arg-type,return-value]
                                    callback_secret="gw", decision_cache=False)
        outcome = await runtime.check(compile_auth_policy(effective), RequestInfo(
            "POST", f"/{MODEL_NS}/granite-closed/v1/chat/completions", "gw", {}),
            identity_override={"authenticated": True, "user": {"username": "alice", "groups": []}})
    assert (outcome.allowed, outcome.status) == (False, 403), outcome


MAAS_API_POLICY = stamp(yaml.safe_load((ROOT / "manifests/base/maas-api/authpolicy.yaml").read_text()),
                        "maas-api", "2026-01-01T00:00:00Z")


@pytest.mark.parametrize(("path", "bearer", "expected"), [
    ("/maas-api/health", None, 200), ("/maas-api/v1/models", None, 401), ("/maas-api/v1/models", "sk-oai-x", 200),
    ("/maas-api/v1/models", "alice-token", 200), ("/maas-api/v1/models", "not-a-token", 401)])
async def test_a_plan_changes_nothing_on_a_route_with_another_policy(path: str, bearer: str | None,
                                                                     expected: int) -> None:
    """maas-api's own route policy (authentication only; maas-api decides): the Plan's entries and rules merged
    into it never decide, so every answer is the one without Plans."""
    for plans in ("none", "plan newer"):
        effective = effective_policy(gateway_policies(plans), [MAAS_API_POLICY])
        assert effective is not None
        async with httpx.AsyncClient(transport=httpx.MockTransport(callbacks)) as http:
            runtime = AuthPolicyRuntime(http, token_review, callback_secret="gw", decision_cache=False)
            headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
            outcome = await runtime.check(compile_auth_policy(effective), RequestInfo("GET", path, "gw", headers))
        assert outcome.status == expected, (plans, outcome)


def test_plan_limits_merge_into_the_route_token_limits() -> None:
    route_trlp = build_token_rate_limit_policy(TokenRateLimitInput(
        ObjectRef(MODEL_NS, "granite-8b"), ObjectRef(MODEL_NS, "granite-8b-route"),
        (SubscriptionLimits(ObjectRef("models-as-a-service", "premium"), (RateTier(100, "1m"),)),)))
    assert route_trlp is not None
    plan_trlp = plan_objects(tokensPerMinute=50)["TokenRateLimitPolicy"]
    effective = effective_policy([plan_trlp], [stamp(route_trlp, "trlp", "2026-01-01T00:00:00Z")])
    assert effective is not None
    assert set(effective["spec"]["limits"]) == {"models-as-a-service-premium-granite-8b-tokens",
                                                f"billing/{GW_NS}/basic/tokens"}


async def test_request_limits_count_per_tenant_and_refuse_over_the_limit() -> None:
    now = [1000.0]
    limiter = RequestLimiter(MemoryCounterStore(lambda: now[0]))
    policy = compile_rate_limit_policy(plan_objects(requestsPerMinute=2)["RateLimitPolicy"])

    async def admit(tenant: str | None) -> Any:
        auth = {"billing": {"tenant": tenant}} if tenant else {}
        return await limiter.admit(policy, "llm/route", {"request": {"url_path": "/llm/m/v1"}, "auth": auth})

    async def counted() -> list[tuple[int, int, bool]]:  # simulate's view: used, remaining, next one refused
        act = {"request": {"url_path": "/llm/m/v1"}, "auth": {"billing": {"tenant": "acme"}}}
        return [(s.used, s.remaining, s.over) for s in await limiter.states(
            limiter.applicable(policy, "llm/route", act))]

    assert await counted() == [(0, 2, False)]
    assert await admit("acme") is None
    assert await counted() == [(1, 1, False)]
    assert await admit("acme") is None
    assert await counted() == [(2, 0, True)]  # as `check` and `admit` say: no room for one more
    act = {"request": {"url_path": "/llm/m/v1"}, "auth": {"billing": {"tenant": "acme"}}}
    assert await limiter.check(policy, "llm/route", act) is not None
    refused = await admit("acme")
    assert refused is not None and refused.limit == 2 and refused.window == "1m" and 1 <= refused.retry_after <= 60
    assert await admit("acme") is not None  # a refused request is not counted, and stays refused
    assert await admit("other-org") is None and await admit(None) is None  # not this Plan's tenant
    now[0] += 61
    assert await admit("acme") is None  # the window reset


def test_a_single_policy_is_used_as_is() -> None:
    route = maas_route_policy()
    assert effective_policy([], [route]) is route
    assert effective_policy([DEFAULT_DENY], []) is DEFAULT_DENY
    assert effective_policy([], []) is None
