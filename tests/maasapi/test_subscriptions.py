"""Pure subscription rules: ownership, mint selection with tie-breaks, request selection."""

from __future__ import annotations

import pytest

from maasctl.maasapi.subscriptions import (
    ModelRef,
    SelectionError,
    Subscription,
    TokenRateLimit,
    rank,
    select_for_mint,
    select_for_request,
    subscription_from_object,
)

from .conftest import NS, sample_subscriptions


def sub(name: str, priority: int = 0, limit: int = 10, ns: str = NS, **kw: object) -> Subscription:
    return Subscription(ns, name, priority=priority, phase=str(kw.pop("phase", "Active")),
                        model_refs=(ModelRef("llm", "m", (TokenRateLimit(limit, "1m"),)),), **kw)  # type: ignore[arg-type]


def test_ownership_by_user_group_and_wildcard() -> None:
    s = sub("a", owner_users=("alice",), owner_groups=("team",))
    assert s.owned_by("alice", [])
    assert s.owned_by("zed", ["team"])
    assert not s.owned_by("zed", ["other"])
    assert sub("b", owner_groups=("*",)).owned_by("anyone", [])
    assert sub("c", owner_users=("*",)).owned_by("anyone", [])


def test_rank_priority_then_limit_then_name() -> None:
    subs = [sub("zeta", 1, 10), sub("alpha", 1, 10), sub("big", 1, 99), sub("top", 5, 1)]
    assert [s.name for s in rank(subs)] == ["top", "big", "alpha", "zeta"]


def test_mint_without_name_picks_highest_priority_usable_owned() -> None:
    subs = sample_subscriptions()
    assert select_for_mint(subs, "alice", ["premium-users"], None, NS).name == "premium"
    # bob owns "broken" (priority 100) but it is Failed, so the best usable one wins
    assert select_for_mint(subs, "bob", ["free-users"], None, NS).ref == "other-ns/bobs"
    assert select_for_mint(subs, "carol", [], None, NS).name == "everyone"


def test_mint_named_subscription_rules() -> None:
    subs = sample_subscriptions()
    assert select_for_mint(subs, "alice", ["premium-users"], "free", NS).name == "free"
    assert select_for_mint(subs, "bob", [], "other-ns/bobs", NS).ref == "other-ns/bobs"
    with pytest.raises(SelectionError) as err:
        select_for_mint(subs, "carol", [], "premium", NS)
    assert err.value.code == "invalid_subscription"
    with pytest.raises(SelectionError) as err:
        select_for_mint(subs, "carol", [], "does-not-exist", NS)
    assert err.value.code == "invalid_subscription"
    with pytest.raises(SelectionError) as err:
        select_for_mint(subs, "bob", [], "broken", NS)
    assert err.value.code == "subscription_not_ready"
    deleting = [sub("gone", owner_users=("bob",), deleting=True)]
    with pytest.raises(SelectionError) as err:
        select_for_mint(deleting, "bob", [], "gone", NS)
    assert err.value.code == "subscription_not_ready"
    with pytest.raises(SelectionError) as err:
        select_for_mint(deleting, "bob", [], None, NS)
    assert err.value.code == "invalid_subscription"


def test_request_selection() -> None:
    subs = sample_subscriptions()
    pick = select_for_request
    # alice owns premium and free, both serve granite -> ambiguous without a header
    with pytest.raises(SelectionError) as err:
        pick(subs, "alice", ["premium-users"], requested=None, bound=None, model="llm/granite",
             default_namespace=NS)
    assert err.value.code == "multiple_subscriptions"
    # only premium serves llama (besides bob's)
    assert pick(subs, "alice", ["premium-users"], requested=None, bound=None, model="llama",
                default_namespace=NS).name == "premium"
    assert pick(subs, "alice", ["premium-users"], requested="free", bound=None, model="llm/granite",
                default_namespace=NS).name == "free"
    assert pick(subs, "alice", ["premium-users"], requested=None, bound=f"{NS}/premium", model="llm/granite",
                default_namespace=NS).name == "premium"
    with pytest.raises(SelectionError) as err:
        pick(subs, "alice", ["premium-users"], requested="free", bound=f"{NS}/premium", model=None,
             default_namespace=NS)
    assert err.value.code == "access_denied"
    with pytest.raises(SelectionError) as err:
        pick(subs, "alice", ["premium-users"], requested="free", bound=None, model="llm/llama",
             default_namespace=NS)
    assert err.value.code == "model_not_in_subscription"
    with pytest.raises(SelectionError) as err:
        pick(subs, "carol", [], requested="premium", bound=None, model=None, default_namespace=NS)
    assert err.value.code == "not_found"
    with pytest.raises(SelectionError) as err:
        pick(subs, "carol", [], requested=None, bound=None, model="llm/granite", default_namespace=NS)
    assert err.value.code == "not_found"
    with pytest.raises(SelectionError) as err:
        pick(subs, "bob", [], requested="broken", bound=None, model=None, default_namespace=NS)
    assert err.value.code == "subscription_not_ready"


def test_subscription_from_object() -> None:
    obj = {
        "metadata": {"name": "s1", "namespace": NS, "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "owner": {"groups": [{"name": "g1"}], "users": ["u1"]},
            "priority": 3,
            "modelRefs": [{"name": "m", "namespace": "llm", "tokenRateLimits": [{"limit": 5, "window": "1m"}],
                           "billingRate": {"perToken": "0.01"}}],
            "tokenMetadata": {"organizationId": "org", "costCenter": "cc", "labels": {"tier": "gold"}},
        },
        "status": {"phase": "Active"},
    }
    s = subscription_from_object(obj)
    assert (s.ref, s.owner_users, s.owner_groups, s.priority, s.phase) == (f"{NS}/s1", ("u1",), ("g1",), 3, "Active")
    assert s.model_refs[0].token_rate_limits == (TokenRateLimit(5, "1m"),)
    assert s.model_refs[0].billing_per_token == "0.01"
    assert s.deleting and not s.usable
    assert s.labels == {"tier": "gold"} and s.organization_id == "org"


def test_unlimited_model_wins_the_limit_tie_break() -> None:
    capped = sub("a-capped", 1, 10**9)
    unlimited = Subscription(NS, "b-unlimited", priority=1, phase="Active",
                             model_refs=(ModelRef("llm", "m", (), unlimited=True),))
    assert [s.name for s in rank([capped, unlimited])] == ["b-unlimited", "a-capped"]
    obj = {"metadata": {"name": "u", "namespace": NS},
           "spec": {"owner": {}, "organization": {"id": "org-1"},
                    "modelRefs": [{"name": "m", "namespace": "llm", "unlimited": True}]}}
    parsed = subscription_from_object(obj)
    assert parsed.model_refs[0].unlimited and parsed.organization_id == "org-1"
