"""`SpecPriorityDuplicate` from the peers sharing a subscription's priority (pure)."""

from __future__ import annotations

import pytest

from maasctl.reconcilers.subscription import PEERS_NAMED, priority_duplicate_condition


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
