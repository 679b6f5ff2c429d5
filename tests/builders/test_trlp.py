"""TokenRateLimitPolicy builder: exact output, aggregation, validation, and end-to-end selection in CEL."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.trlp import (
    RateTier,
    SubscriptionLimits,
    TokenRateLimitInput,
    build_token_rate_limit_policy,
    limit_name,
    subscription_problems,
)
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.cel import compile_expression
from maasctl.contract.selection import select_subscription
from maasctl.contract.views import SubscribedModel, SubscriptionView

from . import authorino
from .fakes import FakeMaasApi

GRANITE = (SubscribedModel("llm", "granite"),)
MODEL = ObjectRef("llm", "granite")
ROUTE = ObjectRef("llm", "granite-kserve-route")
FREE = SubscriptionLimits(ObjectRef("maas", "free"), (RateTier(100, "1m"),))
PREMIUM = SubscriptionLimits(ObjectRef("maas", "premium"), (RateTier(100000, "24h"), RateTier(1000, "1m")))
UNLIMITED = SubscriptionLimits(ObjectRef("maas", "vip"), unlimited=True)


def build(*subs: SubscriptionLimits, gateway: GatewayRef | None = None) -> dict[str, Any]:
    built = build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, subs, gateway))
    assert built is not None
    return built


def test_exact_object() -> None:
    assert build(PREMIUM, FREE, gateway=GatewayRef("tenant-a", "tenant-gw")) == {
        "apiVersion": "kuadrant.io/v1alpha1",
        "kind": "TokenRateLimitPolicy",
        "metadata": {
            "name": "maas-trlp-granite",
            "namespace": "llm",
            "labels": {
                "app.kubernetes.io/managed-by": "maas-controller",
                "app.kubernetes.io/part-of": "maas-subscription",
                "app.kubernetes.io/component": "token-rate-limit-policy",
                "maas.opendatahub.io/model": "granite",
                "maas.opendatahub.io/model-namespace": "llm",
                "maas.opendatahub.io/gateway-namespace": "tenant-a",
                "maas.opendatahub.io/gateway-name": "tenant-gw",
            },
            "annotations": {"maas.opendatahub.io/subscriptions": "maas/free,maas/premium"},
        },
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "granite-kserve-route"},
            "limits": {
                "maas-free-granite-tokens": {
                    "rates": [{"limit": 100, "window": "1m"}],
                    "counters": [{"expression": "auth.identity.userid"}],
                    "when": [
                        {"predicate": 'auth.identity.selected_subscription_key == "maas/free@llm/granite"'},
                        {"predicate": '!request.url_path.endsWith("/v1/models")'},
                    ],
                },
                "maas-premium-granite-tokens": {
                    "rates": [{"limit": 1000, "window": "1m"}, {"limit": 100000, "window": "24h"}],
                    "counters": [{"expression": "auth.identity.userid"}],
                    "when": [
                        {"predicate": 'auth.identity.selected_subscription_key == "maas/premium@llm/granite"'},
                        {"predicate": '!request.url_path.endsWith("/v1/models")'},
                    ],
                },
            },
        },
    }


def test_no_gateway_no_gateway_labels() -> None:
    labels = build(FREE)["metadata"]["labels"]
    assert "maas.opendatahub.io/gateway-name" not in labels
    assert "maas.opendatahub.io/gateway-namespace" not in labels


def test_no_subscriptions_means_no_policy() -> None:
    assert build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, ())) is None


def test_unlimited_is_metered_but_not_limited() -> None:
    limits = build(UNLIMITED)["spec"]["limits"]
    assert limits == {
        "maas-vip-granite-tokens": {
            "rates": [],
            "counters": [{"expression": "auth.identity.userid"}],
            "when": [
                {"predicate": 'auth.identity.selected_subscription_key == "maas/vip@llm/granite"'},
                {"predicate": '!request.url_path.endsWith("/v1/models")'},
            ],
        }
    }


def test_long_model_name_is_truncated() -> None:
    model = ObjectRef("llm", "m" * 250)
    built = build_token_rate_limit_policy(TokenRateLimitInput(model, ROUTE, (FREE,)))
    assert built is not None
    assert len(built["metadata"]["name"]) == 253
    assert len(built["metadata"]["labels"]["maas.opendatahub.io/model"]) <= 63


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        pytest.param(SubscriptionLimits(ObjectRef("n", "s")), "at least one entry", id="no-tiers"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(1, "1m"),), unlimited=True),
                     "mutually exclusive", id="unlimited-and-tiers"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(0, "1m"),)), "outside", id="zero-limit"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(-5, "1m"),)), "outside", id="negative"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(10**12 + 1, "1m"),)), "outside",
                     id="too-large"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(True, "1m"),)), "not an integer",
                     id="bool-limit"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(1, "1d"),)), "window", id="days-window"),
        pytest.param(SubscriptionLimits(ObjectRef("n", "s"), (RateTier(1, "1h30m"),)), "window",
                     id="compound-window"),
    ],
)
def test_subscription_problems(limits: SubscriptionLimits, problem: str) -> None:
    problems = subscription_problems(limits)
    assert any(problem in p for p in problems), problems
    with pytest.raises(InvalidInputError):
        build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, (FREE, limits)))


@pytest.mark.parametrize(
    "limits", [pytest.param(FREE, id="tiers"), pytest.param(UNLIMITED, id="unlimited")]
)
def test_valid_subscriptions_have_no_problems(limits: SubscriptionLimits) -> None:
    assert subscription_problems(limits) == ()


@pytest.mark.parametrize(
    "inp",
    [
        pytest.param(TokenRateLimitInput(MODEL, ROUTE, (FREE, FREE)), id="duplicate-subscription"),
        pytest.param(TokenRateLimitInput(MODEL, ROUTE, (SubscriptionLimits(ObjectRef("a/b", "c"),
                                                                            (RateTier(1, "1m"),)),)),
                     id="slash-in-namespace"),
        pytest.param(TokenRateLimitInput(ObjectRef("llm", "Bad Name"), ROUTE, (FREE,)), id="bad-model-name"),
        pytest.param(TokenRateLimitInput(MODEL, ObjectRef("llm", ""), (FREE,)), id="empty-route-name"),
    ],
)
def test_invalid_inputs(inp: TokenRateLimitInput) -> None:
    with pytest.raises(InvalidInputError):
        build_token_rate_limit_policy(inp)


def matching_limits(policy: dict[str, Any], identity: dict[str, Any], path: str) -> list[str]:
    url_path = path.split("?", 1)[0]
    ctx = {"auth": {"identity": identity}, "request": {"path": path, "url_path": url_path, "headers": {}}}
    return [
        name for name, limit in policy["spec"]["limits"].items()
        if all(compile_expression(w["predicate"]).evaluate_bool(ctx) for w in limit["when"])
    ]


def test_models_listing_is_never_counted() -> None:
    identity = {"selected_subscription_key": "maas/free@llm/granite", "userid": "u"}
    policy = build(FREE, PREMIUM)
    assert matching_limits(policy, identity, "/llm/granite/v1/chat/completions") == ["maas-free-granite-tokens"]
    assert matching_limits(policy, identity, "/llm/granite/v1/models") == []
    # text in the query string never makes a completion look like a listing (it would go uncounted)
    for path in ("/llm/granite/v1/chat/completions?x=/v1/models", "/llm/granite/v1/completions?/v1/models",
                 "/llm/granite/v1/chat/completions?a=1&b=/llm/granite/v1/models"):
        assert matching_limits(policy, identity, path) == ["maas-free-granite-tokens"], path


def test_limits_of_several_billion_tokens_render() -> None:
    """One bound with the API types: a daily limit of billions (admitted by the CRD) is a valid policy."""
    big = SubscriptionLimits(ObjectRef("maas", "big"), (RateTier(5_000_000_000, "24h"),))
    assert subscription_problems(big) == ()
    policy = build(big)
    assert policy["spec"]["limits"]["maas-big-granite-tokens"]["rates"] == [{"limit": 5_000_000_000, "window": "24h"}]


def test_counter_is_per_user() -> None:
    for limit in build(FREE, PREMIUM, UNLIMITED)["spec"]["limits"].values():
        (counter,) = limit["counters"]
        program = compile_expression(counter["expression"])
        assert program.evaluate({"auth": {"identity": {"userid": "alice"}}}) == "alice"


# --- properties -----------------------------------------------------------------------------------------

hostile = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=10)
tiers = st.lists(
    st.builds(RateTier, st.integers(1, 10**9), st.from_regex(r"\A[1-9][0-9]{0,3}[smh]\Z")), min_size=1, max_size=3,
)
sub_limits = st.lists(
    st.one_of(
        st.builds(SubscriptionLimits, st.builds(ObjectRef, hostile, hostile), tiers.map(tuple)),
        st.builds(SubscriptionLimits, st.builds(ObjectRef, hostile, hostile), st.just(()), st.just(True)),
    ),
    min_size=1, max_size=5, unique_by=lambda s: s.subscription,
)


@given(sub_limits, st.randoms())
def test_aggregation_is_order_independent(subs: list[SubscriptionLimits], rnd: Any) -> None:
    shuffled = list(subs)
    rnd.shuffle(shuffled)
    first, second = build(*subs), build(*shuffled)
    assert first == second
    assert set(first["spec"]["limits"]) == {limit_name(s.subscription, MODEL) for s in subs}
    for sub in subs:
        rates = first["spec"]["limits"][limit_name(sub.subscription, MODEL)]["rates"]
        assert sorted((r["limit"], r["window"]) for r in rates) == sorted((t.limit, t.window) for t in sub.tiers)


@given(sub_limits, hostile, hostile)
def test_each_predicate_selects_only_its_subscription(subs: list[SubscriptionLimits], ns: str, name: str) -> None:
    """Hostile names cannot make one subscription's predicate match another's identity."""
    policy = build(*subs)
    for expr in (w["predicate"] for limit in policy["spec"]["limits"].values() for w in limit["when"]):
        compile_expression(expr)
    probe = ObjectRef(ns, name)
    identity = {"selected_subscription_key": f"{probe.key}@llm/granite", "userid": "u"}
    expected = [probe.key] if probe in {s.subscription for s in subs} else []
    assert matching_limits(policy, identity, "/llm/granite/v1/completions") == expected


group_names = st.sampled_from(["free", "premium", "eng", "*", "a,b", 'q"uote'])
user_names = st.sampled_from(["alice", "bob", "carol", "x\\y"])
candidates = st.lists(
    st.builds(
        SubscriptionView,
        namespace=st.sampled_from(["maas", "tenant-a"]),
        name=st.sampled_from(["free", "premium", "gold", "s-1"]),
        priority=st.integers(-2, 2),
        users=st.frozensets(user_names, max_size=2),
        groups=st.frozensets(group_names, max_size=2),
        models=st.just(GRANITE),
    ),
    min_size=1, max_size=5, unique_by=lambda c: (c.namespace, c.name),
)


@settings(max_examples=60, deadline=None)
@given(candidates, user_names, st.lists(group_names, max_size=3))
def test_end_to_end_exactly_the_selected_subscription_is_charged(
    subs: list[SubscriptionView], user: str, groups: list[str]
) -> None:
    """AuthPolicy + maas-api selection + TRLP predicates agree with policy.selection for any user."""
    auth = build_auth_policy(
        AuthPolicyInput(MODEL, ROUTE, (AuthPolicySource(ObjectRef("maas", "all"), groups=("*",)),)),
        AuthSettings("https://maas-api:8443"),
    )
    assert auth is not None
    trlp = build(*(SubscriptionLimits(ObjectRef(c.namespace, c.name), (RateTier(10, "1m"),)) for c in subs))
    fake = FakeMaasApi(subscriptions=subs, tokens={"t": {"username": user, "groups": groups}})
    outcome = authorino.run(auth, {"Authorization": "Bearer t"}, token_review=fake.token_review, http=fake.http)
    expected = select_subscription(subs, user, groups, model="llm/granite")
    if expected.subscription is None:
        assert outcome.status == 403
        return
    assert outcome.status == 200
    assert matching_limits(trlp, outcome.identity, "/llm/granite/v1/chat/completions") == [
        f"{expected.subscription.namespace}-{expected.subscription.name}-granite-tokens"
    ]
