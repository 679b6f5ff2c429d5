"""`check_compiles` must answer exactly as `compile_expression` does, though it compiles a skeleton with the
string literals blanked: every text that could make the two disagree (other quote kinds, prefixes, comments,
escapes cel-python rejects, adjacent literals) must fall back to compiling the text itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.contract.cel import CelCompileError, cel_string, check_compiles, compile_expression, literal_skeleton


def outcome(fn: object, text: str) -> str | None:
    """None when `text` compiles, else the error message."""
    assert callable(fn)
    try:
        fn(text)
    except CelCompileError as exc:
        return str(exc)
    return None


def test_texts_of_one_shape_share_one_skeleton() -> None:
    a = literal_skeleton('auth.identity.selected_subscription_key == "ns/a"')
    b = literal_skeleton("auth.identity.selected_subscription_key == " + cel_string('ns/"b\\ \u00e9\n\x00'))
    assert a == b == 'auth.identity.selected_subscription_key == ""'


TRICKY = [
    # other literal forms: never blanked, the text itself decides
    "'a' == \"b\"", 'r"\\d" == "x"', 'b"abc" == b"abc"', '"""a"b""" == "x"', '"a" "b"', '"" == ""',
    # escapes: valid ones blank, invalid ones must still fail
    '"\\q" == "x"', '"\\x41" == "A"', '"\\101" == "A"', '"\\ud800" == "x"', '"\\U0001f600" == "x"',
    '"\\u00e9" == "x"', '"\\u0000" == "x"', '"\\uffff" == "x"', '"\\n\\r\\t\\\\\\"" == "x"',
    # literals that would hide code: quotes and comments around them
    '"a" == "b" // "c', '"a" == "b"\n// x "y" z', 'x == "a\\" || true || \\"b"', '"a\nb" == "x"',
    '"unterminated == "x', 'a.`b-c` == "x"', '"ok" + 1 == unknownFn("x")', 'size("é") == 1',
    # not a literal problem at all
    'auth.identity.userid == "u" &&', 'nosuch("a")', '"a".nosuchMethod("b")', '"a".startsWith("b")',
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_texts_answer_as_a_full_compile(text: str) -> None:
    compile_expression.cache_clear()
    assert outcome(check_compiles, text) == outcome(compile_expression, text)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["x == {}", "{}.startsWith(y)", "[{}, \"z\"].exists(v, v == w)",
                                   "has(a.b) && a.b == {} || {} in c"]))
def test_any_interpolated_value_answers_as_a_full_compile(value: str, shape: str) -> None:
    text = shape.format(cel_string(value), cel_string(value[::-1]))
    assert check_compiles(text) is None
    assert outcome(compile_expression, text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\"'\\`/rbux0d8n() =a1.")), max_size=16))
def test_random_quote_soup_answers_as_a_full_compile(text: str) -> None:
    assert outcome(check_compiles, text) == outcome(compile_expression, text)
