"""AuthPolicy builder: shape, aggregation, and behaviour through a small Authorino interpreter."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.builders.authpolicy import (
    OBJECTIVE_HEADER,
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    ObjectiveBinding,
    build_auth_policy,
    selection_epoch,
)
from maasctl.builders.celcheck import cel_texts, check_cel
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.cel import compile_expression
from maasctl.contract.routing import BASE_URL_MODEL_ANNOTATION, BASE_URL_PREFIX_ANNOTATION
from maasctl.contract.views import SubscribedModel, SubscriptionView

from . import authorino
from .fakes import FakeMaasApi

GRANITE = (SubscribedModel("llm", "granite"),)
MODEL = ObjectRef("llm", "granite")
ROUTE = ObjectRef("llm", "granite-kserve-route")
SETTINGS = AuthSettings("https://maas-api.opendatahub.svc:8443", token_audiences=("https://kubernetes.default.svc",))
PREMIUM_POLICY = AuthPolicySource(ObjectRef("maas", "premium-access"), groups=("premium-users",))
ALICE_POLICY = AuthPolicySource(ObjectRef("maas", "alice-access"), users=("alice",))
FREE_SUB = SubscriptionView("maas", "free", priority=0, groups=frozenset({"free-users", "premium-users"}),
                     models=GRANITE)
PREMIUM_SUB = SubscriptionView("maas", "premium", priority=10, groups=frozenset({"premium-users"}),
                        models=GRANITE)


def policy(*sources: AuthPolicySource, objectives: tuple[ObjectiveBinding, ...] = ()) -> dict[str, Any]:
    built = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, sources, objectives), SETTINGS)
    assert built is not None
    return built


def api() -> FakeMaasApi:
    return FakeMaasApi(
        subscriptions=[FREE_SUB, PREMIUM_SUB],
        keys={
            "sk-oai-alice": {"valid": True, "username": "alice", "groups": ["premium-users"], "keyId": "k1",
                             "subscription": "maas/free"},
            "sk-oai-bob": {"valid": True, "username": "bob", "groups": ["free-users"], "keyId": "k2",
                           "subscription": "maas/free"},
            "sk-oai-revoked": {"valid": False, "reason": "revoked"},
        },
        tokens={
            "t-alice": {"username": "alice", "groups": ["premium-users", "system:authenticated"]},
            "t-carol": {"username": "carol", "groups": ["system:authenticated"]},
            "t-nogroups": {"username": "dave"},
        },
    )


def run(pol: dict[str, Any], headers: dict[str, str], fake: FakeMaasApi | None = None) -> authorino.Outcome:
    fake = fake or api()
    return authorino.run(pol, headers, token_review=fake.token_review, http=fake.http)


def test_shape() -> None:
    pol = policy(PREMIUM_POLICY, ALICE_POLICY)
    assert pol["apiVersion"] == "kuadrant.io/v1"
    assert pol["kind"] == "AuthPolicy"
    assert pol["metadata"] == {
        "name": "maas-auth-granite",
        "namespace": "llm",
        "labels": {
            "app.kubernetes.io/managed-by": "maas-controller",
            "app.kubernetes.io/part-of": "maas-auth-policy",
            "app.kubernetes.io/component": "auth-policy",
            "maas.opendatahub.io/model": "granite",
            "maas.opendatahub.io/model-namespace": "llm",
        },
        "annotations": {"maas.opendatahub.io/auth-policies": "maas/alice-access,maas/premium-access"},
    }
    spec = pol["spec"]
    assert spec["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": "granite-kserve-route"}
    rules = spec["rules"]
    assert set(rules) == {"authentication", "metadata", "authorization", "response"}
    assert rules["authentication"]["kubernetes-tokens"]["kubernetesTokenReview"] == {
        "audiences": ["https://kubernetes.default.svc"]
    }
    assert rules["metadata"]["apiKeyValidation"]["http"]["url"] == (
        "https://maas-api.opendatahub.svc:8443/internal/v1/api-keys/validate"
    )
    assert rules["metadata"]["subscriptionInfo"]["http"]["url"] == (
        "https://maas-api.opendatahub.svc:8443/internal/v1/subscriptions/select"
    )
    assert list(rules["response"]["success"]["headers"]) == ["x-maas-subscription", "x-maas-identity"]
    assert set(rules["response"]["success"]["filters"]["identity"]["json"]["properties"]) == {
        "userid", "groups", "groups_str", "keyId", "selected_subscription", "selected_subscription_namespace",
        "organization_id",
        "selected_subscription_key", "subscription_info",
    }


def test_no_sources_means_no_policy() -> None:
    assert build_auth_policy(AuthPolicyInput(MODEL, ROUTE, ()), SETTINGS) is None


def test_an_in_cluster_model_is_named_for_the_base_url() -> None:
    """The data plane sends a base-URL request naming the model to its route's path (`contract.routing`); the
    policy says which name and which path, and nothing else changes (the rules are the same)."""
    plain = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), SETTINGS)
    named = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,),
                                              base_url=("ibm/granite-8b", "/llm/granite")), SETTINGS)
    assert plain is not None and named is not None
    assert BASE_URL_MODEL_ANNOTATION not in plain["metadata"]["annotations"]
    assert named["metadata"]["annotations"][BASE_URL_MODEL_ANNOTATION] == "ibm/granite-8b"
    assert named["metadata"]["annotations"][BASE_URL_PREFIX_ANNOTATION] == "/llm/granite"
    assert named["spec"] == plain["spec"]


@pytest.mark.parametrize("prefix", ["/llm/../maas-api", "llm/granite", "/llm/granite/", "/llm/gr%61nite", "/"])
def test_a_prefix_that_is_not_a_plain_path_is_refused(prefix: str) -> None:
    with pytest.raises(InvalidInputError, match="path prefix"):
        build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,), base_url=("granite", prefix)), SETTINGS)


def test_no_audiences_leaves_token_review_default() -> None:
    built = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), AuthSettings("http://maas-api"))
    assert built is not None
    assert built["spec"]["rules"]["authentication"]["kubernetes-tokens"]["kubernetesTokenReview"] == {}


@pytest.mark.parametrize(
    ("ttl", "cached"), [pytest.param(60, True, id="cached"), pytest.param(0, False, id="no-cache")]
)
def test_cache_ttl(ttl: int, cached: bool) -> None:
    built = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), AuthSettings("http://m", (), ttl))
    assert built is not None
    for entry in built["spec"]["rules"]["metadata"].values():
        assert ("cache" in entry) is cached
        if cached:
            assert entry["cache"]["ttl"] == ttl
    if not cached:
        assert run(built, {"Authorization": "Bearer sk-oai-alice"}).status == 200


def test_negative_cache_ttl_is_rejected() -> None:
    with pytest.raises(InvalidInputError):
        build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), AuthSettings("http://m", (), -1))


def test_aggregation_is_order_independent_and_deduplicated() -> None:
    dup = AuthPolicySource(ObjectRef("maas", "dup"), users=("alice",), groups=("premium-users",))
    assert policy(PREMIUM_POLICY, ALICE_POLICY, dup) == policy(dup, ALICE_POLICY, PREMIUM_POLICY)


def test_every_expression_compiles() -> None:
    pol = policy(PREMIUM_POLICY, ALICE_POLICY, objectives=(ObjectiveBinding(ObjectRef("maas", "free"), "obj-a"),))
    expressions = cel_texts(pol)
    assert len(expressions) > 15
    for text in expressions:
        compile_expression(text)
    check_cel(pol)


GRANITE_PATH = "/llm/granite/v1/chat/completions"


@pytest.mark.parametrize(
    ("sources", "headers", "status", "denied_by", "subscription"),
    [
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer sk-oai-alice"}, 200, "", "free",
                     id="api-key-uses-bound-subscription"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer sk-oai-revoked"}, 403, "api-key-valid", None,
                     id="api-key-invalid"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer sk-oai-unknown"}, 403, "api-key-valid", None,
                     id="api-key-unknown"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer sk-oai-bob"}, 403, "allowed-subjects", None,
                     id="api-key-user-not-allowed"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer t-alice"}, 200, "", "premium",
                     id="token-highest-priority"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer t-alice", "X-MaaS-Subscription": "free"}, 200, "",
                     "free", id="token-explicit-subscription"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer t-alice", "X-MaaS-Subscription": "maas/nope"},
                     403, "subscription-selected", None, id="token-explicit-unknown-subscription"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer t-carol"}, 403, "allowed-subjects", None,
                     id="token-user-not-allowed"),
        pytest.param((ALICE_POLICY,), {"Authorization": "Bearer t-alice"}, 200, "", "premium",
                     id="allowed-by-user-name"),
        pytest.param((AuthPolicySource(ObjectRef("maas", "all"), users=("*",)),), {"Authorization": "Bearer t-carol"},
                     403, "subscription-selected", None, id="star-allows-anyone-but-needs-subscription"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer bogus"}, 401, "", None, id="token-invalid"),
        pytest.param((PREMIUM_POLICY,), {}, 401, "", None, id="no-credentials"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer t-alice", "X-MaaS-Username": "root"}, 403,
                     "no-client-identity-headers", None, id="client-identity-header-rejected"),
        pytest.param((PREMIUM_POLICY,), {"Authorization": "Bearer sk-oai-alice", "x-maas-group": "admins"}, 403,
                     "no-client-identity-headers", None, id="client-group-header-rejected"),
        pytest.param((AuthPolicySource(ObjectRef("maas", "all"), groups=("*",)),),
                     {"Authorization": "Bearer t-nogroups"}, 403, "subscription-selected", None,
                     id="token-without-groups"),
    ],
)
def test_behaviour(
    sources: tuple[AuthPolicySource, ...], headers: dict[str, str], status: int, denied_by: str,
    subscription: str | None,
) -> None:
    outcome = run(policy(*sources), headers)
    assert (outcome.status, outcome.denied_by) == (status, denied_by)
    if subscription is not None:
        assert outcome.headers == {"x-maas-subscription": subscription}
        assert outcome.identity["selected_subscription"] == subscription
        assert outcome.identity["selected_subscription_key"] == f"maas/{subscription}@llm/granite"


SCHEDULER_SPELLINGS = [
    "x-gateway-inference-objective", "X-Gateway-Inference-Objective", "x_gateway_inference_objective",
    "x-gateway-inference-fairness-id", "x-gateway-destination-endpoint", "x-gateway-destination-endpoint-subset",
    "x-gateway-model-name-rewrite", "x-gateway-inference-request-cost", "x-gateway-anything-next-release",
    "x-llm-d-inference-objective", "X_LLM_D_INFERENCE_OBJECTIVE", "x-llm-d-priority",
    "x-prefiller-host-port", "x-encoder-hosts-ports", "x-data-parallel-host-port", "x-slo-ttft-ms",
    "X-SLO-TPOT-MS", "x-original-path", "x-forwarded-path", "x-forwarded-user", "X_Remote_User",
]


@pytest.mark.parametrize("header", SCHEDULER_SPELLINGS)
def test_the_envoy_policy_refuses_the_headers_the_local_gateway_refuses(header: str) -> None:
    """An Envoy data plane enforces the same header contract as the local gateway: every header an inference
    scheduler reads (objective, fairness bucket, destination endpoint, peers, SLOs, path) and every identity
    header, in any case or with `_`, is refused by the generated policy (`contract.edge.server_decided`)."""
    from maasctl.contract.edge import server_decided

    assert server_decided(header)
    for credential in ("Bearer t-alice", "Bearer sk-oai-alice"):
        outcome = run(policy(PREMIUM_POLICY), {"Authorization": credential, header: "other"})
        assert (outcome.status, outcome.denied_by) == (403, "no-client-identity-headers"), header


@pytest.mark.parametrize("header", ["x-maas-subscription", "X_MAAS_SUBSCRIPTION", "x-session-token",
                                    "x-request-id", "x-gateway", "x-llm-dx", "x-slo"])
def test_the_envoy_policy_lets_client_choices_through(header: str) -> None:
    from maasctl.contract.edge import server_decided

    assert not server_decided(header)
    value = "free" if "subscription" in header.lower() else "v"
    outcome = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice", header: value})
    assert outcome.status == 200, (header, outcome.denied_by)


def test_identity_exports_subscription_info_with_its_labels_for_tier_limits() -> None:
    gold = SubscriptionView("maas", "gold", priority=20, groups=frozenset({"premium-users"}), models=GRANITE,
                            organization_id="acme", cost_center="cc-1", labels=(("tier", "gold"),))
    fake = api()
    fake.subscriptions = [FREE_SUB, PREMIUM_SUB, gold]
    outcome = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice"}, fake)
    assert outcome.identity["subscription_info"] == {
        "name": "gold", "namespace": "maas", "organizationId": "acme", "costCenter": "cc-1",
        "labels": {"tier": "gold"}}
    # what a tier TokenRateLimitPolicy predicate reads
    tier = compile_expression('auth.identity.subscription_info.labels.tier == "gold"')
    assert tier.evaluate_bool({"auth": {"identity": outcome.identity}})
    plain = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-carol"},
                FakeMaasApi(subscriptions=[SubscriptionView("maas", "s", users=frozenset({"*"}), models=GRANITE)],
                            tokens={"t-carol": {"username": "carol", "groups": ["premium-users"]}}))
    assert plain.identity["subscription_info"]["labels"] == {}
    assert not compile_expression('"tier" in auth.identity.subscription_info.labels').evaluate_bool(
        {"auth": {"identity": plain.identity}})


def test_identity_export_for_api_key() -> None:
    outcome = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer sk-oai-alice"})
    assert outcome.identity == {
        "userid": "alice",
        "groups": ["premium-users"],
        "groups_str": "premium-users",
        "keyId": "k1",
        "selected_subscription": "free",
        "selected_subscription_namespace": "maas",
        "selected_subscription_key": "maas/free@llm/granite",
        "organization_id": "",
        "subscription_info": {"name": "free", "namespace": "maas", "organizationId": "", "costCenter": "",
                              "labels": {}},
    }
    # The validate call gets the raw key, the select call the key's identity and bound subscription.
    (_, validate_body), (_, select_body) = outcome.calls
    assert validate_body == {"key": "sk-oai-alice"}
    assert select_body == {"username": "alice", "groups": ["premium-users"], "requestedSubscription": "",
                           "keySubscription": "maas/free", "requestedModel": "llm/granite"}


def test_identity_export_for_token() -> None:
    outcome = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice"})
    assert outcome.identity["userid"] == "alice"
    assert outcome.identity["groups_str"] == "premium-users,system:authenticated"
    assert outcome.identity["keyId"] == ""
    assert [url.rsplit("/", 1)[-1] for url, _ in outcome.calls] == ["select"]


def test_api_key_cannot_switch_subscription_with_the_header() -> None:
    for named in ("premium", "maas/premium", "no-such"):  # one rule with maas-api: the header is ignored for keys
        other = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer sk-oai-alice", "X-MaaS-Subscription": named})
        assert other.status == 200 and other.headers["x-maas-subscription"] == "free", named
    own = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer sk-oai-alice", "X-MaaS-Subscription": "free"})
    assert own.status == 200 and own.headers["x-maas-subscription"] == "free"


def test_objective_header_follows_selected_subscription() -> None:
    bindings = (ObjectiveBinding(ObjectRef("maas", "premium"), "maas-premium-0123456789"),)
    pol = policy(PREMIUM_POLICY, objectives=bindings)
    premium = run(pol, {"Authorization": "Bearer t-alice"})
    assert premium.headers == {"x-maas-subscription": "premium", OBJECTIVE_HEADER: "maas-premium-0123456789",
                               "x-gateway-inference-objective": "maas-premium-0123456789"}
    free = run(pol, {"Authorization": "Bearer sk-oai-alice"})
    assert free.headers == {"x-maas-subscription": "free"}


@pytest.mark.parametrize(
    ("inp", "settings_"),
    [
        pytest.param(AuthPolicyInput(MODEL, ObjectRef("llm", "Bad_Route"), (PREMIUM_POLICY,)), SETTINGS,
                     id="bad-route-name"),
        pytest.param(AuthPolicyInput(ObjectRef("llm", 'x"y'), ROUTE, (PREMIUM_POLICY,)), SETTINGS,
                     id="hostile-model-name"),
        pytest.param(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), AuthSettings("maas-api:8443"),
                     id="url-without-scheme"),
        pytest.param(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,)), AuthSettings("https://x/{path}"),
                     id="url-with-placeholder"),
        pytest.param(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,),
                                     (ObjectiveBinding(ObjectRef("maas", "a"), 'bad"name'),)), SETTINGS,
                     id="bad-objective-name"),
        pytest.param(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,),
                                     (ObjectiveBinding(ObjectRef("maas", "a"), "o1"),
                                      ObjectiveBinding(ObjectRef("maas", "a"), "o2"))), SETTINGS,
                     id="two-objectives-for-one-subscription"),
    ],
)
def test_invalid_inputs(inp: AuthPolicyInput, settings_: AuthSettings) -> None:
    with pytest.raises(InvalidInputError):
        build_auth_policy(inp, settings_)


hostile = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    users=st.lists(hostile, max_size=3),
    groups=st.lists(hostile, max_size=3),
    caller=hostile,
    caller_groups=st.lists(hostile, max_size=3),
)
def test_subjects_admit_exactly_the_allowed_callers(
    users: list[str], groups: list[str], caller: str, caller_groups: list[str]
) -> None:
    source = AuthPolicySource(ObjectRef("maas", "p"), users=tuple(users), groups=tuple(groups))
    pol = policy(source)
    sub = SubscriptionView("maas", "s", users=frozenset({"*"}), models=GRANITE)
    fake = FakeMaasApi(subscriptions=[sub], tokens={"t": {"username": caller, "groups": caller_groups}})
    outcome = run(pol, {"Authorization": "Bearer t"}, fake)
    allowed = "*" in users or "*" in groups or caller in users or any(g in groups for g in caller_groups)
    assert (outcome.status == 200) is allowed
    if allowed:
        assert outcome.identity["groups_str"] == ",".join(caller_groups)
        assert outcome.identity["userid"] == caller


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(hostile, hostile), min_size=1, max_size=4, unique=True), st.data())
def test_objective_header_with_hostile_subscription_names(refs: list[tuple[str, str]], data: st.DataObject) -> None:
    bindings = tuple(ObjectiveBinding(ObjectRef(ns, name), f"obj-{i}") for i, (ns, name) in enumerate(refs))
    pol = policy(AuthPolicySource(ObjectRef("maas", "all"), users=("*",)), objectives=bindings)
    check_cel(pol)
    chosen = data.draw(st.integers(0, len(refs) - 1))
    ns, name = refs[chosen]
    sub = SubscriptionView(ns, name, users=frozenset({"*"}), models=GRANITE)
    fake = FakeMaasApi(subscriptions=[sub], tokens={"t": {"username": "u", "groups": []}})
    outcome = run(pol, {"Authorization": "Bearer t"}, fake)
    assert outcome.status == 200
    assert outcome.headers[OBJECTIVE_HEADER] == outcome.headers["x-gateway-inference-objective"] == f"obj-{chosen}"
    assert outcome.identity["selected_subscription_key"] == f"{ns}/{name}@llm/granite"


def test_the_route_of_one_tenant_gateway_selects_only_that_gateways_subscriptions() -> None:
    """The AuthPolicy of a route on one tenant Gateway names it in the selection; elsewhere it names none and
    maas-api takes the default Gateway. The same caller gets a different subscription, or none."""
    tenant = GatewayRef("gw", "tenant-a")
    on_tenant = SubscriptionView("maas", "tenant-gold", priority=0, groups=frozenset({"premium-users"}),
                                 models=GRANITE, gateway="gw/tenant-a")
    fake = api()
    fake.subscriptions = [*fake.subscriptions, on_tenant]
    plain = policy(PREMIUM_POLICY)
    bound = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,), tenant_gateway=tenant), SETTINGS)
    assert bound is not None
    assert "gw/tenant-a" in json.dumps(bound) and "tenant-a" not in json.dumps(plain)
    check_cel(bound)
    token = {"Authorization": "Bearer t-alice"}
    assert run(plain, token, fake).identity["selected_subscription"] == "premium"
    assert run(bound, token, fake).identity["selected_subscription"] == "tenant-gold"
    key = {"Authorization": "Bearer sk-oai-alice"}  # bound to maas/free, a default-Gateway subscription
    assert run(plain, key, fake).status == 200
    assert run(bound, key, fake).status == 403
    nobody = {"Authorization": "Bearer t-carol"}
    assert run(bound, nobody, fake).status == 403


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer sk-oai-alice"}, {"x-api-key": "sk-oai-alice"},
    {"Authorization": "Bearer sk-oai-alice", "X-MaaS-Subscription": "free"}, {"Authorization": "Bearer t-alice"},
    {"Authorization": "Bearer t-alice", "X-MaaS-Subscription": "premium"},
], ids=["key", "x-api-key", "key-and-header", "token", "token-and-header"])
def test_a_decision_for_a_plain_request_runs_entirely_on_the_compiled_fast_path(
        headers: dict[str, str], cel_interpreted: list[str]) -> None:
    """Every expression of an ordinary decision is answered by `celfast`, none interpreted by cel-python
    (0.3-0.9 ms each): the gateway's decision cost depends on it."""
    bindings = (ObjectiveBinding(ObjectRef("maas", "premium"), "maas-premium-0123456789"),)
    outcome = run(policy(PREMIUM_POLICY, ALICE_POLICY, objectives=bindings), headers)
    assert outcome.status == 200 and outcome.identity["userid"] == "alice"
    assert cel_interpreted == []



_PART = st.text(alphabet="ab|,:\\", max_size=5)


def _selection_key(credential: str, requested: str, user: str = "u", groups: tuple[str, ...] = ()) -> Any:
    rule = policy(PREMIUM_POLICY)["spec"]["rules"]["metadata"]["subscriptionInfo"]
    headers = {"authorization": credential, **({"x-maas-subscription": requested} if requested else {})}
    ctx = {"request": {"path": "/llm/granite/v1/models", "method": "GET", "headers": headers},
           "auth": {"identity": {"user": {"username": user, "groups": list(groups)}}, "metadata": {}}}
    return compile_expression(rule["cache"]["key"]["expression"]).evaluate(ctx)


@pytest.mark.parametrize(("one", "other"), [
    pytest.param(("Bearer t1", "", "a|b", ("c",)), ("Bearer t2", "", "a", ("b|c",)), id="separator-in-username"),
    pytest.param(("Bearer t1", "", "a", ("x,y",)), ("Bearer t2", "", "a", ("x", "y")), id="comma-in-group"),
    pytest.param(("Bearer t1", "free|", "a", ()), ("Bearer t2", "", "a|free", ()), id="separator-in-header"),
    pytest.param(("Bearer t|free", "", "a", ()), ("Bearer t", "free|", "a", ()), id="separator-in-credential"),
    pytest.param(("Bearer t\\", "|x", "a", ()), ("Bearer t\\|", "x", "a", ()), id="backslash-before-separator"),
    pytest.param(("Bearer t1", "free", "a", ()), ("Bearer t1", "premium", "a", ()), id="requested-subscription"),
])
def test_different_callers_never_share_a_cached_subscription_selection(
        one: tuple[str, str, str, tuple[str, ...]], other: tuple[str, str, str, tuple[str, ...]]) -> None:
    """Keyed by username and groups joined with separators, user `a|b` in group `c` and user `a` in group `b|c`
    (or groups `x,y` and `x`, `y`) shared a cached selection; the key is now the caller's credential and the
    requested subscription, escaped."""
    assert _selection_key(*one) != _selection_key(*other)


@settings(max_examples=300, deadline=None)
@given(_PART, _PART, _PART, _PART)
def test_the_selection_cache_key_reads_one_way_only(c1: str, h1: str, c2: str, h2: str) -> None:
    same = (c1, h1) == (c2, h2)
    assert (_selection_key("Bearer " + c1, h1) == _selection_key("Bearer " + c2, h2)) == same


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"])
def test_the_routing_header_passes_on_base_url_paths(path: str) -> None:
    """The processor sets `x-gateway-model-name` from the body before Authorino runs (after refusing a client's)."""
    outcome = authorino.run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice", "x-gateway-model-name": "m"},
                            token_review=api().token_review, http=api().http, path=path)
    assert outcome.status == 200, outcome.denied_by


@pytest.mark.parametrize(("path", "header"), [
    ("/llm/granite/v1/chat/completions", "x-gateway-model-name"),
    ("/v1/models", "x-gateway-model-name"),
    ("/v1/chat/completions?x=1", "x-gateway-model-name"),
    ("/v1/chat/completions", "x_gateway_model_name"),
    ("/v1/chat/completions", "X-Gateway-Model-Name-Rewrite"),
    ("/v1/chat/completions", "x-gateway-inference-objective"),
])
def test_the_routing_header_is_refused_elsewhere(path: str, header: str) -> None:
    outcome = authorino.run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice", header: "m"},
                            token_review=api().token_review, http=api().http, path=path)
    assert (outcome.status, outcome.denied_by) == (403, "no-client-identity-headers")


# --- x-maas-identity: what the payload processor behind Kuadrant's filter reads --------------------------

def _rendered_filter(spec: dict[str, Any], ctx_outcome: Any) -> dict[str, Any]:
    """A `json` filter's properties evaluated the way Authorino would for the admitted request."""
    return {k: v["value"] if "value" in v else compile_expression(v["expression"]).evaluate(ctx_outcome)
            for k, v in spec["json"]["properties"].items()}


@pytest.mark.parametrize("credential", ["Bearer sk-oai-alice", "Bearer t-alice"])
def test_the_identity_header_carries_exactly_what_the_identity_filter_exports(credential: str) -> None:
    outcome = run(policy(PREMIUM_POLICY, ALICE_POLICY), {"Authorization": credential})
    assert outcome.status == 200 and outcome.carried is not None
    assert dict(outcome.carried.identity) == outcome.identity
    assert dict(outcome.carried.subscription_info) == {
        "organizationId": "", "costCenter": "", "labels": {}}
    # no Plan names an empty tenant, so the billing filter is inert here
    assert dict(outcome.carried.filters) == {"billing": {"tenant": "", "keyLabels": {}}}


def test_the_identity_header_carries_the_tenant_cost_center_labels_and_key_labels() -> None:
    org = SubscriptionView("maas", "gold", priority=5, groups=frozenset({"premium-users"}), models=GRANITE,
                           organization_id="acme", cost_center="cc-7", labels=(("tier", "gold"),))
    fake = FakeMaasApi(subscriptions=[org], keys={"sk-oai-k": {
        "valid": True, "username": "alice", "groups": ["premium-users"], "keyId": "k9", "subscription": "maas/gold",
        "labels": {"team": "search"}}})
    outcome = authorino.run(policy(PREMIUM_POLICY), {"Authorization": "Bearer sk-oai-k"},
                            token_review=fake.token_review, http=fake.http)
    assert outcome.status == 200 and outcome.carried is not None
    assert dict(outcome.carried.subscription_info) == {
        "organizationId": "acme", "costCenter": "cc-7", "labels": {"tier": "gold"}}
    assert dict(outcome.carried.filters) == {"billing": {"tenant": "acme", "keyLabels": {"team": "search"}}}
    assert outcome.carried.identity["organization_id"] == "acme"


def test_the_identity_header_carries_the_guardrails_filter_only_where_it_applies() -> None:
    from maasctl.builders.guardrails import GuardrailsAttachment, guardrails_filter
    from maasctl.contract.guardrails import SettingsView

    on = SettingsView("maas", "default", enabled=True, fail_open=True, timeout=7.0)
    guard = guardrails_filter(GuardrailsAttachment(on, "http://engine:8000", ((ObjectRef("maas", "premium"),
                                                                               "safety"),), frozenset({"safety"})))
    assert guard is not None
    pol = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,), guardrails=guard), SETTINGS)
    assert pol is not None
    check_cel(pol)
    guarded = run(pol, {"Authorization": "Bearer t-alice"})  # premium: guarded
    assert guarded.carried is not None and guarded.identity["selected_subscription"] == "premium"
    assert guarded.carried.filters["guardrails"] == {
        "config": "safety", "ready": True, "url": "http://engine:8000", "failurePolicy": "FailOpen",
        "timeoutSeconds": "7.0"}
    plain = run(pol, {"Authorization": "Bearer sk-oai-alice"})  # the key is bound to free: not guarded
    assert plain.carried is not None and "guardrails" not in plain.carried.filters


def test_the_identity_header_is_refused_by_the_authorizer_when_a_client_sends_it() -> None:
    outcome = run(policy(PREMIUM_POLICY), {"Authorization": "Bearer t-alice", "x-maas-identity": '{"identity": {}}'})
    assert (outcome.status, outcome.denied_by) == (403, "no-client-identity-headers")


@pytest.mark.parametrize("change", [
    pytest.param({"phase": "Failed"}, id="failed"),
    pytest.param({"priority": 11}, id="priority"),
    pytest.param({"groups": frozenset({"premium-users", "other"})}, id="owner"),
    pytest.param({"models": ()}, id="model-dropped"),
    pytest.param({"gateway": "tenant/gw"}, id="gateway"),
    pytest.param({"problem": "invalid spec"}, id="invalid"),
])
def test_a_subscription_change_moves_the_selection_cache_key(change: dict[str, Any]) -> None:
    """A selection cached before a subscription changed (Failed, owner or priority edited, ...) is never reused
    after it: the epoch, a digest of what the selection rule reads, is part of the selection's cache key."""
    before = selection_epoch([FREE_SUB, PREMIUM_SUB])
    assert before == selection_epoch([PREMIUM_SUB, FREE_SUB])  # order does not matter
    after = selection_epoch([FREE_SUB, dataclasses.replace(PREMIUM_SUB, **change)])
    assert after != before
    assert selection_epoch([FREE_SUB]) != before  # deleted

    def key(epoch: str) -> Any:
        built = build_auth_policy(AuthPolicyInput(MODEL, ROUTE, (PREMIUM_POLICY,), selection_epoch=epoch), SETTINGS)
        assert built is not None
        rule = built["spec"]["rules"]["metadata"]["subscriptionInfo"]
        ctx = {"request": {"path": "/llm/granite/v1/models", "method": "GET", "headers": {"authorization": "t"}},
               "auth": {"identity": {"user": {"username": "u", "groups": []}}, "metadata": {}}}
        return compile_expression(rule["cache"]["key"]["expression"]).evaluate(ctx)

    assert key(before) != key(after) and key(before) == key(before)


def test_a_status_write_that_changes_nothing_selection_reads_keeps_the_epoch() -> None:
    """The controller's own status writes (conditions, observed generation) must not re-render every policy."""
    same = dataclasses.replace(PREMIUM_SUB, phase="Active")
    assert selection_epoch([same]) == selection_epoch([dataclasses.replace(same, display_name="Premium")])
