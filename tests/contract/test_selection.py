"""Subscription selection: entitlement, explicit choice, priority, tie-break, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.selection import (
    Candidate,
    SelectionCode,
    is_entitled,
    parse_ref,
    rank,
    select_subscription,
    subscription_key,
)

M = "llm/m1"
FREE = Candidate("maas", "free", 0, groups=frozenset({"free-users"}), models=frozenset({M}))
PREMIUM = Candidate("maas", "premium", 10, groups=frozenset({"premium-users"}), models=frozenset({M, "llm/m2"}))
ALICE_ONLY = Candidate("maas", "alice", 5, users=frozenset({"alice"}), models=frozenset({"llm/m2"}))
EVERYONE = Candidate("maas", "everyone", -1, users=frozenset({"*"}), models=frozenset({M}))
TIE_B = Candidate("maas", "b", 3, groups=frozenset({"g"}), models=frozenset({M}))
TIE_A = Candidate("maas", "a", 3, groups=frozenset({"g"}), models=frozenset({M}))
ALL = (FREE, PREMIUM, ALICE_ONLY, EVERYONE, TIE_A, TIE_B)


@pytest.mark.parametrize(
    ("user", "groups", "model", "requested", "code", "chosen"),
    [
        pytest.param("alice", ["premium-users"], M, None, SelectionCode.SELECTED, PREMIUM, id="highest-priority"),
        pytest.param("bob", ["free-users"], M, None, SelectionCode.SELECTED, FREE, id="group-member"),
        pytest.param("carol", [], M, None, SelectionCode.SELECTED, EVERYONE, id="star-any-authenticated"),
        pytest.param("", [], M, None, SelectionCode.NOT_FOUND, None, id="star-needs-a-user"),
        pytest.param("carol", [], "llm/m2", None, SelectionCode.NOT_FOUND, None, id="no-subscription-for-model"),
        pytest.param("alice", [], "llm/m2", None, SelectionCode.SELECTED, ALICE_ONLY, id="user-owner"),
        pytest.param("x", ["g"], M, None, SelectionCode.SELECTED, TIE_A, id="tie-broken-by-name"),
        pytest.param("alice", ["premium-users"], M, "maas/free", SelectionCode.NOT_FOUND, None,
                     id="explicit-not-entitled"),
        pytest.param("bob", ["free-users"], M, "maas/free", SelectionCode.SELECTED, FREE, id="explicit-ref"),
        pytest.param("bob", ["free-users"], M, "free", SelectionCode.SELECTED, FREE, id="explicit-bare-name"),
        pytest.param("bob", ["free-users"], M, "other/free", SelectionCode.NOT_FOUND, None,
                     id="explicit-wrong-namespace"),
        pytest.param("bob", ["free-users"], M, "maas/nope", SelectionCode.NOT_FOUND, None, id="explicit-missing"),
        pytest.param("bob", ["free-users"], "llm/m2", "maas/free", SelectionCode.MODEL_NOT_IN_SUBSCRIPTION, None,
                     id="explicit-without-model"),
        pytest.param("alice", ["premium-users"], None, None, SelectionCode.SELECTED, PREMIUM, id="any-model"),
        pytest.param("Alice", ["Premium-Users"], "llm/m2", None, SelectionCode.NOT_FOUND, None,
                     id="case-sensitive"),
    ],
)
def test_select(
    user: str, groups: list[str], model: str | None, requested: str | None, code: SelectionCode,
    chosen: Candidate | None,
) -> None:
    result = select_subscription(ALL, user, groups, model=model, requested=requested, default_namespace="maas")
    assert result.code is code
    assert result.subscription == chosen
    assert result.ok is (chosen is not None)
    assert result.message or result.ok


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("ns/name", ("ns", "name"), id="ref"),
        pytest.param("name", ("default", "name"), id="bare"),
        pytest.param(" ns/name ", ("ns", "name"), id="blanks"),
    ],
)
def test_parse_ref(text: str, expected: tuple[str, str]) -> None:
    assert parse_ref(text, "default") == expected


def test_subscription_key() -> None:
    assert subscription_key("maas", "premium", "llm", "m1") == "maas/premium@llm/m1"


def test_star_in_groups_entitles_everyone() -> None:
    assert is_entitled(Candidate("n", "s", groups=frozenset({"*"})), "anyone", [])


names = st.text(alphabet="abc*", min_size=1, max_size=3)
candidates = st.lists(
    st.builds(
        Candidate,
        namespace=st.sampled_from(["maas", "other"]),
        name=st.text(alphabet="xyz", min_size=1, max_size=2),
        priority=st.integers(-3, 3),
        users=st.frozensets(names, max_size=2),
        groups=st.frozensets(names, max_size=2),
        models=st.frozensets(st.sampled_from(["llm/a", "llm/b"]), max_size=2),
    ),
    max_size=6,
    unique_by=lambda c: (c.namespace, c.name),
)


@given(candidates, names, st.lists(names, max_size=3), st.sampled_from(["llm/a", "llm/b", None]), st.randoms())
def test_selection_is_the_best_entitled_candidate_in_any_order(
    subs: list[Candidate], user: str, groups: list[str], model: str | None, rnd: object
) -> None:
    result = select_subscription(subs, user, groups, model=model)
    shuffled = list(subs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert select_subscription(shuffled, user, groups, model=model) == result
    usable = [c for c in subs if is_entitled(c, user, groups) and (model is None or model in c.models)]
    if not usable:
        assert result.code is SelectionCode.NOT_FOUND
        return
    chosen = result.subscription
    assert chosen is not None and chosen in usable
    assert chosen.priority == max(c.priority for c in usable)
    assert chosen == rank(usable)[0]
    assert all((chosen.namespace, chosen.name) <= (c.namespace, c.name) for c in usable
               if c.priority == chosen.priority)
