"""`SpecPriorityDuplicate` from the peers sharing a subscription's priority (pure), and the peers read from
the priority index of a store."""

from __future__ import annotations

from collections.abc import Set
from typing import Any, cast

import pytest

from maasctl.reconcilers.indexes import PRIORITY_INDEX
from maasctl.reconcilers.subscription import (
    PEERS_NAMED,
    priority_duplicate_condition,
    priority_index,
    same_priority_peers,
)
from maasctl.runtime.objects import FrozenObject, freeze
from maasctl.runtime.store import Store


def test_no_peer_is_false() -> None:
    status, reason, _ = priority_duplicate_condition(3, [])
    assert (status, reason) == ("False", "NoDuplicatePeers")


@pytest.mark.parametrize("count", [1, 2, PEERS_NAMED])
def test_a_small_group_is_named(count: int) -> None:
    peers = [f"s{i}" for i in range(count)]
    status, reason, message = priority_duplicate_condition(3, peers)
    assert (status, reason) == ("True", "SharedPriority")
    assert message.startswith(f"priority 3 is shared with {', '.join(peers)};")


@pytest.mark.parametrize("count", [PEERS_NAMED + 1, PEERS_NAMED + 2, 500])
def test_a_large_group_has_one_message_whatever_its_size_and_members(count: int) -> None:
    """The message must not depend on the group beyond its size passing PEERS_NAMED: otherwise every member's
    status changes whenever one joins or leaves."""
    status, reason, message = priority_duplicate_condition(3, [f"s{i}" for i in range(count)])
    assert (status, reason) == ("True", "SharedPriority")
    assert message == priority_duplicate_condition(3, [f"x{i}" for i in range(PEERS_NAMED + 1)])[2]
    assert "s0" not in message


def subscription(name: str, priority: int = 0, deleting: bool = False) -> FrozenObject:
    meta: dict[str, Any] = {"name": name, "namespace": "subs"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return freeze({"metadata": meta, "spec": {"priority": priority}})


class StoreCache:
    """The one cache method the peers are read with, over a plain store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def index_keys(self, gvk: object, index: str, value: str) -> Set[str]:
        return self.store.index_keys(index, value)


def peers_in(subs: list[FrozenObject], me: FrozenObject) -> list[str]:
    store = Store()
    store.add_indexer(PRIORITY_INDEX, priority_index)
    for sub in subs:
        store.upsert(f"subs/{sub['metadata']['name']}", sub)

    class Ctx:
        cache = StoreCache(store)

    return same_priority_peers(cast(Any, Ctx()), me)


def test_peers_are_the_other_live_subscriptions_of_the_priority_sorted() -> None:
    me = subscription("m")
    subs = [me, subscription("z"), subscription("b"), subscription("gone", deleting=True), subscription("o", 1)]
    assert peers_in(subs, me) == ["b", "z"]
    assert peers_in([me], me) == []


def test_a_large_group_yields_enough_peers_for_the_constant_message() -> None:
    me = subscription("s3")
    subs = [subscription(f"s{i}") for i in range(40)] + [subscription("gone", deleting=True)]
    peers = peers_in(subs, me)
    assert len(peers) == PEERS_NAMED + 1 and "s3" not in peers and "gone" not in peers
    assert set(peers) <= {f"s{i}" for i in range(40)}
    assert priority_duplicate_condition(0, peers)[2] == priority_duplicate_condition(
        0, [f"x{i}" for i in range(PEERS_NAMED + 1)])[2]


def test_group_exactly_at_the_limit_is_named_in_full() -> None:
    me = subscription("me")
    others = [subscription(f"p{i}") for i in range(PEERS_NAMED)]
    assert peers_in([me, *others], me) == sorted(f"p{i}" for i in range(PEERS_NAMED))


def test_a_subscription_being_deleted_is_in_no_priority_group() -> None:
    assert priority_index(subscription("a", 4)) == ["subs/4"]
    assert priority_index(subscription("a", 4, deleting=True)) == []
