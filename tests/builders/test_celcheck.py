"""check_cel finds every CEL text and reports all that do not compile."""

from __future__ import annotations

import pytest

from maasctl.builders.celcheck import cel_texts, check_cel
from maasctl.contract.cel import CelCompileError
from maasctl.runtime.objects import freeze

OBJ = {
    "kind": "TokenRateLimitPolicy",
    "metadata": {"name": "maas-trlp-m"},
    "spec": {
        "limits": {"a": {"when": [{"predicate": "x == 1"}], "counters": [{"expression": "auth.identity.userid"}]}},
        "other": {"expression": {"not": "a string"}, "value": "x ==="},
    },
}


def test_cel_texts_finds_predicates_and_expressions_only() -> None:
    assert cel_texts(OBJ) == ["x == 1", "auth.identity.userid"]
    assert cel_texts({}) == []


def test_cel_texts_of_a_cached_object_are_the_same() -> None:
    """The informer cache freezes lists into tuples; a standby compiles cached policies' texts (its warm-up)."""
    assert cel_texts(freeze(OBJ)) == cel_texts(OBJ)
    assert cel_texts(freeze({"spec": {"rules": [[{"predicate": "a"}], ({"expression": "b"},)]}})) == ["a", "b"]


def test_check_cel_passes_valid_object() -> None:
    check_cel(OBJ)


def test_check_cel_reports_every_error() -> None:
    bad = {"kind": "AuthPolicy", "metadata": {"name": "p"},
           "spec": {"a": {"predicate": "1 +"}, "b": [{"expression": 'nosuch("x")'}]}}
    with pytest.raises(CelCompileError) as info:
        check_cel(bad)
    message = str(info.value)
    assert message.startswith("AuthPolicy p: ")
    assert "does not parse" in message and "nosuch" in message
