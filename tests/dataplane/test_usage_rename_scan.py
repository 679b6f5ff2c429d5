"""`set_top_level_model` finds strings and brackets with a regex; it must answer exactly as the byte-by-byte
scanner it replaced (kept here as the oracle) for well-formed answers and for any byte soup."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.dataplane.jsonscan import rename_top_level_model, replace_spans, set_top_level_model


def _string_end(data: bytes, start: int) -> int:
    escaped = False
    for i in range(start + 1, len(data)):
        c = data[i]
        if escaped:
            escaped = False
        elif c == 0x5C:
            escaped = True
        elif c == 0x22:
            return i + 1
    return -1


def oracle(data: bytes, name: str) -> bytes | None:
    """The previous implementation's scan, one byte at a time."""
    spans: list[tuple[int, int]] = []
    depth, i = 0, 0
    while i < len(data):
        c = data[i]
        if c == 0x22:
            end = _string_end(data, i)
            if end < 0:
                return None
            if depth == 1:
                after = end
                while after < len(data) and data[after] in b" \t\r\n":
                    after += 1
                if after < len(data) and data[after] == 0x3A:
                    try:
                        key = json.loads(data[i:end])
                    except (ValueError, UnicodeDecodeError):
                        return None
                    value = after + 1
                    while value < len(data) and data[value] in b" \t\r\n":
                        value += 1
                    if key == "model" and value < len(data) and data[value] == 0x22:
                        value_end = _string_end(data, value)
                        if value_end < 0:
                            return None
                        spans.append((value, value_end))
                        i = value_end
                        continue
            i = end
            continue
        if c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
        i += 1
    return replace_spans(data, spans, json.dumps(name, ensure_ascii=False).encode()) if spans else None


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["model", "id", "m", "mo\"del", "é"]),
                                                                inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["model", "id", "choices", "model\\", "usage"]), JSON_VALUES, max_size=5),
       st.booleans(), st.sampled_from(["", "data: "]), st.text(max_size=6))
def test_well_formed_answers_match_the_byte_scanner(doc: dict[str, object], ascii_only: bool, prefix: str,
                                                     name: str) -> None:
    data = (prefix + json.dumps(doc, ensure_ascii=ascii_only, indent=None if ascii_only else 1)).encode()
    assert set_top_level_model(data, name) == oracle(data, name)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from([b'"', b"\\", b"{", b"}", b"[", b"]", b":", b" ", b"\n", b"model", b'"model"',
                                 b"\x01", b"\xff", b",", b"x", b'\\"']), max_size=24), st.text(max_size=4))
def test_any_byte_soup_matches_the_byte_scanner(parts: list[bytes], name: str) -> None:
    data = b"".join(parts)
    assert set_top_level_model(data, name) == oracle(data, name)


def test_a_typical_answer_is_renamed() -> None:
    answer = json.dumps({"id": "c", "model": "gpt-x", "choices": [{"message": {"content": "model: \"y\""}}]})
    assert set_top_level_model(answer.encode(), "gpt") == answer.replace('"gpt-x"', '"gpt"').encode()


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(st.sampled_from(["model", "id", "choices", "model\\", "usage", "m"]), JSON_VALUES, max_size=5),
       st.text(max_size=8), st.booleans(), st.sampled_from(["", "data: "]), st.text(max_size=6))
def test_the_fast_rename_answers_as_the_full_scan(doc: dict[str, object], model: str, ascii_only: bool, prefix: str,
                                                  name: str) -> None:
    """`rename_top_level_model` (in place when the top-level key is the only `"model"`) gives the same bytes as
    the scan, for answers with nested `model` keys, quotes and escapes in strings, non-ASCII either way."""
    doc = {**doc, "model": model}
    data = (prefix + json.dumps(doc, ensure_ascii=ascii_only, indent=None if ascii_only else 1)).encode()
    assert rename_top_level_model(data, doc, name) == set_top_level_model(data, name)


@pytest.mark.parametrize("data", [
    b'{"model": "a", "x": {"model": "a"}}',  # nested: the scan decides
    b'{"model": "a", "model": "a"}',  # duplicated top-level key
    b'{"mod\\u0065l": "a", "c": "\\"model"}',  # escaped key, and a string ending in \\"model
    b'{"c": "\\"model", "model": "a"}',
    b'{"model": "\\u0061"}',  # the value spelled with an escape
    b'{"model": "a", "mod\\u0065l": "a"}',  # a duplicate whose key is escaped: the last one wins
    b'{"x": {"model": "a"}, "mod\\u0065l": "a"}',  # the only literal "model" is nested
    b'{"x": {"model": "a"}, "mod\\u0065l": "a", "e": "\\u00e9"}',
])
def test_what_the_fast_path_cannot_vouch_for_takes_the_scan(data: bytes) -> None:
    parsed = json.loads(data)
    assert rename_top_level_model(data, parsed, "b") == set_top_level_model(data, "b")
