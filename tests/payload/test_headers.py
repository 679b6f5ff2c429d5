"""Header mutations both ways: the processor's diff, and Envoy's application under its default rules."""

from __future__ import annotations

import pytest
from envoy.config.core.v3 import base_pb2

from maasctl.payload import headers as hdr

BEFORE = [("host", "gw"), ("authorization", "Bearer caller"), ("x-a", "1"), ("x-a", "2"), ("accept", "*/*")]


class TestDiff:
    """What the stages changed, and only that, becomes the mutation; applying it gives the stages' headers."""

    @pytest.mark.parametrize("after", [
        [("host", "gw"), ("authorization", "Bearer provider"), ("x-a", "1"), ("x-a", "2"), ("accept", "*/*")],
        [("host", "gw"), ("x-a", "1"), ("x-a", "2")],
        [("host", "gw"), ("authorization", "Bearer caller"), ("x-a", "3"), ("accept", "*/*"), ("x-new", "v")],
        [("host", "gw"), ("authorization", "Bearer caller"), ("x-a", "1"), ("x-a", "2"), ("x-a", "9"),
         ("accept", "*/*")],
    ], ids=["replace", "remove", "change-and-add", "append"])
    def test_round_trip(self, after: list[tuple[str, str]]) -> None:
        m = hdr.diff(BEFORE, after)
        assert m is not None
        assert sorted(hdr.apply_mutation(BEFORE, m)) == sorted(after)

    def test_unchanged_is_none(self) -> None:
        assert hdr.diff(BEFORE, list(reversed(BEFORE[2:4])) and BEFORE) is None

    @pytest.mark.parametrize("name", ["host", ":authority", ":method", ":scheme", "x-envoy-original-path"])
    def test_fixed_headers_never_in_a_mutation(self, name: str) -> None:
        assert hdr.diff([(name, "a")], [(name, "b")]) is None
        assert hdr.diff([(name, "a")], []) is None


class TestEnvoyRules:
    """Envoy's default HeaderMutationRules: fixed headers and x-envoy-* ignored, `:` headers never removed,
    removals before sets, append actions honoured."""

    @pytest.mark.parametrize("name", ["host", ":authority", ":method", ":scheme", "x-envoy-upstream"])
    def test_rejected_sets_are_ignored(self, name: str) -> None:
        before = [(name, "orig")]
        assert hdr.apply_mutation(before, hdr.mutation([(name, "evil", False)])) == before

    @pytest.mark.parametrize("name", [":path", ":status", "host"])
    def test_system_headers_never_removed(self, name: str) -> None:
        assert hdr.apply_mutation([(name, "v")], hdr.mutation([], [name])) == [(name, "v")]

    def test_remove_then_set(self) -> None:
        out = hdr.apply_mutation([("authorization", "a")], hdr.mutation([("authorization", "b", False)],
                                                                         ["authorization"]))
        assert out == [("authorization", "b")]

    @pytest.mark.parametrize(("action", "present", "expected"), [
        (base_pb2.HeaderValueOption.ADD_IF_ABSENT, True, [("x", "old")]),
        (base_pb2.HeaderValueOption.ADD_IF_ABSENT, False, [("x", "new")]),
        (base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS, False, []),
        (base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS, True, [("x", "new")]),
        (base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD, True, [("x", "old"), ("x", "new")]),
    ])
    def test_append_actions(self, action: int, present: bool, expected: list[tuple[str, str]]) -> None:
        m = hdr.mutation([("x", "new", False)])
        m.set_headers[0].append_action = action
        assert hdr.apply_mutation([("x", "old")] if present else [], m) == expected

    def test_value_or_raw_value(self) -> None:
        header_map = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key="A", value="text"),
                                                 base_pb2.HeaderValue(key="b", raw_value=b"raw")])
        assert hdr.from_map(header_map) == [("a", "text"), ("b", "raw")]
