"""The CEL environment: Kuadrant's string extensions, literal quoting, compile checks, evaluation errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.cel import (
    CelCompileError,
    CelEvaluationError,
    cel_string,
    cel_string_list,
    compile_expression,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param('"a,b,,c".split(",")', ["a", "b", "", "c"], id="split"),
        pytest.param('"a,b,c".split(",", 2)', ["a", "b,c"], id="split-limit"),
        pytest.param('"a,b".split(",", 0)', [], id="split-limit-zero"),
        pytest.param('"a,b".split(",", -1)', ["a", "b"], id="split-limit-negative"),
        pytest.param('"abc".split("")', ["a", "b", "c"], id="split-empty-separator"),
        pytest.param('"abc".split("", 2)', ["a", "bc"], id="split-empty-separator-limit"),
        pytest.param('"".split(",")', [""], id="split-empty-string"),
        pytest.param('["a", "b"].join(",")', "a,b", id="join"),
        pytest.param('["a", "b"].join()', "ab", id="join-no-separator"),
        pytest.param("[].join(',')", "", id="join-empty"),
        pytest.param('"AbÉ".lowerAscii()', "abÉ", id="lowerAscii-ascii-only"),
        pytest.param('"abé".upperAscii()', "ABé", id="upperAscii-ascii-only"),
        pytest.param('"aaa".replace("a", "b")', "bbb", id="replace"),
        pytest.param('"aaa".replace("a", "b", 2)', "bba", id="replace-limit"),
        pytest.param('"  x \\t".trim()', "x", id="trim"),
        pytest.param('"hello".indexOf("l")', 2, id="indexOf"),
        pytest.param('"hello".indexOf("l", 3)', 3, id="indexOf-offset"),
        pytest.param('"hello".indexOf("z")', -1, id="indexOf-missing"),
        pytest.param('"hello".lastIndexOf("l")', 3, id="lastIndexOf"),
        pytest.param('"hello".lastIndexOf("l", 2)', 2, id="lastIndexOf-offset"),
        pytest.param('"Bearer sk".substring(7)', "sk", id="substring"),
        pytest.param('"hello".substring(1, 3)', "el", id="substring-range"),
        pytest.param('"héllo".charAt(1)', "é", id="charAt"),
        pytest.param('"hi".charAt(2)', "", id="charAt-end"),
        pytest.param('"a,b".split(",").exists(g, g == "b")', True, id="string-trick"),
        pytest.param('{"a": [1, 2.5, true, null]}', {"a": [1, 2.5, True, None]}, id="plain-python-result"),
        pytest.param('"a" + "b"', "ab", id="concat"),
    ],
)
def test_extension_functions(expression: str, expected: Any) -> None:
    assert compile_expression(expression).evaluate({}) == expected


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param('"abc".substring(2, 1)', id="substring-reversed"),
        pytest.param('"abc".substring(4)', id="substring-past-end"),
        pytest.param('"abc".charAt(-1)', id="charAt-negative"),
        pytest.param('"abc".indexOf("a", 9)', id="indexOf-offset-out-of-range"),
        pytest.param('"abc".lastIndexOf("a", 9)', id="lastIndexOf-offset-out-of-range"),
        pytest.param('[1, 2].join(",")', id="join-non-strings"),
        pytest.param('"a".join(",")', id="join-on-string"),
        pytest.param("x.split(1)", id="split-non-string-separator"),
        pytest.param('"a".split(",", "x")', id="split-non-int-limit"),
        pytest.param("x.missing", id="missing-field"),
        pytest.param("1 / 0", id="division-by-zero"),
    ],
)
def test_evaluation_errors_raise(expression: str) -> None:
    with pytest.raises(CelEvaluationError):
        compile_expression(expression).evaluate({"x": {}})


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("1 +", id="syntax"),
        pytest.param('nosuch("x")', id="unknown-global-function"),
        pytest.param('"x".nosuch()', id="unknown-method"),
        pytest.param('"x".split(",").frobnicate()', id="unknown-chained-method"),
        pytest.param('"unterminated', id="unterminated-string"),
    ],
)
def test_compile_errors(expression: str) -> None:
    with pytest.raises(CelCompileError):
        compile_expression(expression)


def test_compile_is_cached() -> None:
    assert compile_expression('"x" == "x"') is compile_expression('"x" == "x"')


@pytest.mark.parametrize(
    ("expression", "ok"),
    [pytest.param("1 == 1", True, id="bool"), pytest.param('"x"', False, id="string")],
)
def test_evaluate_bool_requires_bool(expression: str, ok: bool) -> None:
    program = compile_expression(expression)
    if ok:
        assert program.evaluate_bool({}) is True
    else:
        with pytest.raises(CelEvaluationError):
            program.evaluate_bool({})


# Kubernetes objects are JSON: any string but lone surrogates can reach a builder.
json_text = st.text(st.characters(codec="utf-8"))


@given(json_text)
def test_cel_string_round_trips_any_text(value: str) -> None:
    literal = cel_string(value)
    assert literal.isascii()
    assert compile_expression(literal).evaluate({}) == value


@given(json_text, json_text)
def test_cel_string_comparison_is_exact(a: str, b: str) -> None:
    predicate = f"x == {cel_string(b)}"
    assert compile_expression(predicate).evaluate_bool({"x": a}) is (a == b)


@given(st.lists(json_text, max_size=5), json_text)
def test_cel_string_list_membership(values: list[str], probe: str) -> None:
    predicate = f"x in {cel_string_list(values)}"
    assert compile_expression(predicate).evaluate_bool({"x": probe}) is (probe in values)


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters=",")), min_size=1), )
def test_join_then_split_round_trips_comma_free_groups(groups: list[str]) -> None:
    """The groups_str "string trick": join(",") then split(",") gives the groups back."""
    expr = compile_expression('groups.join(",").split(",")')
    assert expr.evaluate({"groups": groups}) == groups
