"""Subscription selection, the one rule set: entitlement, bound keys, explicit choice, priority, ties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.selection import (
    SelectionCode,
    parse_ref,
    select_subscription,
    subscription_key,
)
from maasctl.contract.views import SubscribedModel, SubscriptionView, Tier

M = "llm/m1"
LIM = (Tier(100, "1m"),)


def sub(name: str, priority: int = 0, *, users: tuple[str, ...] = (), groups: tuple[str, ...] = (),
        models: tuple[str, ...] = (M,), ns: str = "maas", **kw: object) -> SubscriptionView:
    refs = tuple(SubscribedModel(*m.split("/", 1), LIM) for m in models)
    return SubscriptionView(ns, name, priority=priority, users=frozenset(users), groups=frozenset(groups),
                            models=refs, phase=str(kw.pop("phase", "Active")), **kw)  # type: ignore[arg-type]


FREE = sub("free", 0, groups=("free-users",))
PREMIUM = sub("premium", 10, groups=("premium-users",), models=(M, "llm/m2"))
ALICE_ONLY = sub("alice", 5, users=("alice",), models=("llm/m2",))
EVERYONE = sub("everyone", -1, users=("*",))
TIE_A = sub("a", 3, groups=("g",))
TIE_B = sub("b", 3, groups=("g",))
BROKEN = sub("broken", 100, users=("bob",), phase="Failed")
GONE = sub("gone", 100, users=("bob",), deleting=True)
INVALID = SubscriptionView("maas", "invalid", priority=100, users=frozenset({"bob"}), problem="invalid object")
ALL = (FREE, PREMIUM, ALICE_ONLY, EVERYONE, TIE_A, TIE_B, BROKEN, GONE, INVALID)


@pytest.mark.parametrize(
    ("user", "groups", "model", "requested", "bound", "code", "chosen"),
    [
        pytest.param("alice", ["premium-users"], M, None, None, SelectionCode.SELECTED, PREMIUM, id="highest"),
        pytest.param("bob", ["free-users"], M, None, None, SelectionCode.SELECTED, FREE,
                     id="failed-deleting-invalid-are-not-candidates"),
        pytest.param("carol", [], M, None, None, SelectionCode.SELECTED, EVERYONE, id="star-any-authenticated"),
        pytest.param("", [], M, None, None, SelectionCode.NOT_FOUND, None, id="star-needs-a-user"),
        pytest.param("carol", [], "llm/m2", None, None, SelectionCode.NOT_FOUND, None, id="no-sub-for-model"),
        pytest.param("alice", [], "llm/m2", None, None, SelectionCode.SELECTED, ALICE_ONLY, id="user-owner"),
        pytest.param("x", ["g"], M, None, None, SelectionCode.MULTIPLE, None, id="tie-at-the-top"),
        pytest.param("x", ["g"], M, "maas/b", None, SelectionCode.SELECTED, TIE_B, id="header-breaks-the-tie"),
        pytest.param("alice", ["premium-users"], M, "maas/free", None, SelectionCode.NOT_FOUND, None,
                     id="explicit-not-entitled"),
        pytest.param("bob", ["free-users"], M, "maas/free", None, SelectionCode.SELECTED, FREE, id="explicit-ref"),
        pytest.param("bob", ["free-users"], M, "free", None, SelectionCode.SELECTED, FREE, id="explicit-bare"),
        pytest.param("bob", ["free-users"], M, "other/free", None, SelectionCode.NOT_FOUND, None,
                     id="explicit-wrong-namespace"),
        pytest.param("bob", ["free-users"], M, "maas/nope", None, SelectionCode.NOT_FOUND, None, id="missing"),
        pytest.param("bob", ["free-users"], "llm/m2", "maas/free", None, SelectionCode.MODEL_NOT_IN_SUBSCRIPTION,
                     None, id="explicit-without-model"),
        pytest.param("bob", [], M, "broken", None, SelectionCode.NOT_READY, None, id="explicit-failed"),
        pytest.param("bob", [], M, "gone", None, SelectionCode.NOT_READY, None, id="explicit-deleting"),
        pytest.param("bob", [], M, "invalid", None, SelectionCode.NOT_READY, None, id="explicit-invalid"),
        pytest.param("alice", ["premium-users"], None, None, None, SelectionCode.SELECTED, PREMIUM, id="any-model"),
        pytest.param("Alice", ["Premium-Users"], "llm/m2", None, None, SelectionCode.NOT_FOUND, None,
                     id="case-sensitive"),
        pytest.param("alice", ["premium-users", "free-users"], M, None, "maas/free", SelectionCode.SELECTED, FREE,
                     id="key-uses-its-bound-subscription-not-the-highest"),
        pytest.param("alice", ["premium-users", "free-users"], M, "maas/premium", "maas/free", SelectionCode.SELECTED,
                     FREE, id="key-with-another-header-keeps-its-binding"),
        pytest.param("alice", ["premium-users", "free-users"], M, "maas/nope", "maas/free", SelectionCode.SELECTED,
                     FREE, id="key-with-an-unknown-header-keeps-its-binding"),
        pytest.param("alice", ["premium-users"], M, "maas/premium", "maas/free", SelectionCode.NOT_FOUND, None,
                     id="key-header-never-widens-an-unentitled-binding"),
        pytest.param("alice", ["free-users"], M, "free", "maas/free", SelectionCode.SELECTED, FREE,
                     id="key-with-its-own-header"),
        pytest.param("alice", [], M, None, "maas/free", SelectionCode.NOT_FOUND, None,
                     id="key-owner-no-longer-entitled"),
        pytest.param("x", ["g"], M, "", "", SelectionCode.MULTIPLE, None, id="empty-strings-are-not-a-choice"),
    ],
)
def test_select(
    user: str, groups: list[str], model: str | None, requested: str | None, bound: str | None,
    code: SelectionCode, chosen: SubscriptionView | None,
) -> None:
    result = select_subscription(ALL, user, groups, model=model, requested=requested, bound=bound,
                                 default_namespace="maas")
    assert result.code is code, result.message
    assert result.subscription == chosen
    assert result.ok is (chosen is not None)
    assert result.message or result.ok


def test_tie_names_the_candidates() -> None:
    result = select_subscription(ALL, "x", ["g"], model=M)
    assert result.candidates == ("maas/a", "maas/b")
    assert "maas/a" in result.message and "maas/b" in result.message and "X-MaaS-Subscription" in result.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [("ns/name", ("ns", "name")), ("name", ("default", "name")), (" ns/name ", ("ns", "name"))],
)
def test_parse_ref(text: str, expected: tuple[str, str]) -> None:
    assert parse_ref(text, "default") == expected


def test_subscription_key() -> None:
    assert subscription_key("maas", "premium", "llm", "m1") == "maas/premium@llm/m1"


names = st.text(alphabet="abc*", min_size=1, max_size=3)
views = st.lists(
    st.builds(
        lambda ns, name, prio, users, groups, models, phase: sub(
            name, prio, users=tuple(users), groups=tuple(groups), models=tuple(models), ns=ns, phase=phase),
        st.sampled_from(["maas", "other"]),
        st.text(alphabet="xyz", min_size=1, max_size=2),
        st.integers(-3, 3),
        st.frozensets(names, max_size=2),
        st.frozensets(names, max_size=2),
        st.frozensets(st.sampled_from(["llm/a", "llm/b"]), max_size=2),
        st.sampled_from(["Active", "Degraded", "Failed", ""]),
    ),
    max_size=6,
    unique_by=lambda s: (s.namespace, s.name),
)


@given(views, names, st.lists(names, max_size=3), st.sampled_from(["llm/a", "llm/b", None]), st.randoms())
def test_implicit_selection_is_the_unique_best_candidate_in_any_order(
    subs: list[SubscriptionView], user: str, groups: list[str], model: str | None, rnd: random.Random
) -> None:
    result = select_subscription(subs, user, groups, model=model)
    shuffled = list(subs)
    rnd.shuffle(shuffled)
    assert select_subscription(shuffled, user, groups, model=model) == result
    usable = [s for s in subs if s.usable and s.entitles(user, groups) and (model is None or s.includes(model))]
    if not usable:
        assert result.code is SelectionCode.NOT_FOUND
        return
    best = max(s.priority for s in usable)
    top = [s for s in usable if s.priority == best]
    if len(top) > 1:
        assert result.code is SelectionCode.MULTIPLE
        assert set(result.candidates) == {s.key for s in top}
    else:
        assert result.subscription == top[0]


# --- tenant gateways ---------------------------------------------------------------------------------------

DEFAULT_GW, TENANT_GW, OTHER_GW = "gw/default", "gw/tenant-a", "gw/tenant-b"
ON_DEFAULT = sub("on-default", 10, users=("alice",))
ON_DEFAULT_NAMED = sub("on-default-named", 0, users=("alice",), gateway=DEFAULT_GW)
ON_TENANT = sub("on-tenant", 5, users=("alice",), gateway=TENANT_GW)
TENANT_SUBS = (ON_DEFAULT, ON_DEFAULT_NAMED, ON_TENANT)


@pytest.mark.parametrize(
    ("gateway", "requested", "bound", "code", "chosen"),
    [
        pytest.param(None, None, None, SelectionCode.SELECTED, ON_DEFAULT, id="minting-is-not-filtered"),
        pytest.param(DEFAULT_GW, None, None, SelectionCode.SELECTED, ON_DEFAULT, id="default-gateway"),
        pytest.param(TENANT_GW, None, None, SelectionCode.SELECTED, ON_TENANT,
                     id="tenant-gateway-ignores-higher-priority-elsewhere"),
        pytest.param(OTHER_GW, None, None, SelectionCode.NOT_FOUND, None, id="no-subscription-on-that-gateway"),
        pytest.param(TENANT_GW, None, "maas/on-default", SelectionCode.ACCESS_DENIED, None,
                     id="key-bound-elsewhere"),
        pytest.param(DEFAULT_GW, None, "maas/on-tenant", SelectionCode.ACCESS_DENIED, None,
                     id="tenant-key-through-default"),
        pytest.param(TENANT_GW, "maas/on-default-named", None, SelectionCode.ACCESS_DENIED, None,
                     id="header-names-a-subscription-of-another-gateway"),
        pytest.param(DEFAULT_GW, "on-default-named", None, SelectionCode.SELECTED, ON_DEFAULT_NAMED,
                     id="explicit-default-gateway-ref"),
        pytest.param(TENANT_GW, None, "maas/on-tenant", SelectionCode.SELECTED, ON_TENANT, id="tenant-key"),
    ],
)
def test_requests_select_only_subscriptions_of_the_gateway_they_arrive_through(
    gateway: str | None, requested: str | None, bound: str | None, code: SelectionCode,
    chosen: SubscriptionView | None,
) -> None:
    for order in (TENANT_SUBS, tuple(reversed(TENANT_SUBS))):
        got = select_subscription(order, "alice", [], model=M, requested=requested, bound=bound,
                                  default_namespace="maas", gateway=gateway, default_gateway=DEFAULT_GW)
        assert (got.code, got.subscription) == (code, chosen)


def test_a_subscription_of_another_gateway_is_never_a_candidate_whatever_its_priority() -> None:
    high = sub("high", 1000, users=("alice",), gateway=OTHER_GW)
    got = select_subscription((ON_DEFAULT, high), "alice", [], model=M, gateway=DEFAULT_GW,
                              default_gateway=DEFAULT_GW)
    assert got.subscription == ON_DEFAULT
    tie = sub("tie", 10, users=("alice",), gateway=OTHER_GW)  # same priority, other gateway: no tie
    got = select_subscription((ON_DEFAULT, tie), "alice", [], model=M, gateway=DEFAULT_GW, default_gateway=DEFAULT_GW)
    assert got.code is SelectionCode.SELECTED and got.subscription == ON_DEFAULT
