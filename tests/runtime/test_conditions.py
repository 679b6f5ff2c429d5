"""Conditions follow metav1.Condition semantics."""

from __future__ import annotations

import pytest

from maasctl.runtime.conditions import find_condition, is_true, remove_condition, set_condition

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_new_condition_gets_transition_time_and_generation() -> None:
    conds = set_condition(None, type_="Ready", status="False", reason="Pending", observed_generation=3, now=T0)
    assert conds == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Pending",
            "message": "",
            "lastTransitionTime": T0,
            "observedGeneration": 3,
        }
    ]


def test_transition_time_changes_only_when_status_changes() -> None:
    conds = set_condition(None, type_="Ready", status="False", reason="Pending", now=T0)
    same = set_condition(conds, type_="Ready", status="False", reason="StillPending", message="x", now=T1)
    assert same[0]["lastTransitionTime"] == T0
    assert same[0]["reason"] == "StillPending"
    flipped = set_condition(same, type_="Ready", status="True", reason="Ready", now=T1)
    assert flipped[0]["lastTransitionTime"] == T1
    assert is_true(flipped, "Ready")
    assert not is_true(same, "Ready")


def test_other_conditions_keep_order_and_input_is_not_mutated() -> None:
    conds = set_condition(None, type_="A", status="True", reason="Ok", now=T0)
    conds = set_condition(conds, type_="B", status="True", reason="Ok", now=T0)
    before = [dict(c) for c in conds]
    out = set_condition(conds, type_="A", status="False", reason="Broken", now=T1)
    assert [c["type"] for c in out] == ["A", "B"]
    assert conds == before
    assert find_condition(out, "B") == before[1]
    assert remove_condition(out, "A") == [before[1]]


@pytest.mark.parametrize(
    ("status", "reason"),
    [("Yes", "Ok"), ("True", ""), ("True", "has space"), ("True", "1Digit"), ("True", "trailing,")],
    ids=["bad-status", "empty-reason", "space", "digit-first", "trailing-comma"],
)
def test_invalid_status_or_reason_is_rejected(status: str, reason: str) -> None:
    with pytest.raises(ValueError):
        set_condition(None, type_="Ready", status=status, reason=reason, now=T0)
