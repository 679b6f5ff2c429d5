"""The compiled fast path (`celfast`) may answer only what cel-python answers the same way.

Random expressions over the covered subset meet random JSON activations: whenever the fast path gives a
value, cel-python must give the same value of the same type (never an error); whenever it is unsure, the
program's answer is cel-python's. The expressions maasctl generates must take the fast path on the requests
the gateway sees, or the speed-up is not real.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from maasctl.contract.cel import CelCompileError, CelEvaluationError, cel_string, compile_expression
from maasctl.contract.celfast import Unsure, plain_result

from ..cel_shadow import typed

INT64 = 2**63
compile_expression("x")  # cel-python raises the recursion limit on its first use: not inside a hypothesis test


def reference(text: str, activation: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "value", typed(compile_expression(text).interpret(activation))
    except CelEvaluationError:
        return "error", None


def fast(text: str, activation: dict[str, Any]) -> tuple[str, Any] | None:
    program = compile_expression(text)
    if program.fast is None:
        return None
    try:
        return "value", typed(program.fast(activation))
    except Unsure:
        return None


def agrees(text: str, activation: dict[str, Any]) -> bool:
    """The fast answer (when there is one) is cel-python's, and `evaluate` gives cel-python's answer."""
    want = reference(text, activation)
    got = fast(text, activation)
    assert got is None or got == want, (text, activation, got, want)
    try:
        answer = ("value", typed(compile_expression(text).evaluate(activation)))
    except CelEvaluationError:
        answer = ("error", None)
    assert answer == want, (text, activation, answer, want)
    return got is not None


# --- random expressions and activations -------------------------------------------------------------------

WORDS = st.sampled_from(["", "a", "b", "ab", "a,b", "x-maas-sub", "é", "A"])
# cel-python converts the whole activation first and fails on an int beyond int64 anywhere in it, read or not;
# the fast path checks only the values it reads (see `UNSURE_CASES`), so random activations stay in range.
INTS = st.sampled_from([0, 1, -1, 2, 7, INT64 - 1, -INT64])
SCALARS = st.one_of(WORDS, INTS, st.booleans(), st.none(), st.sampled_from([0.0, 1.5, -2.5, float("nan")]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
    max_leaves=8)
ACTIVATION = st.fixed_dictionaries({"x": JSON, "y": JSON}, optional={"z": JSON})

LITERALS = st.one_of(
    WORDS.map(cel_string), st.sampled_from(["0", "1", "-1", "7", "9223372036854775807", "-9223372036854775808",
                                            "true", "false", "null", "1.5", "0.0", "'a'", 'r"a\\b"', '"""ab"""',
                                            "3u", 'b"a"', "0x10", '"\\u00e9"']))
ATOMS = st.one_of(LITERALS, st.sampled_from(["x", "y", "z", "v", "int", "[]", "{}"]))


def _composite(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "&&", "||", "*"]),
                  inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"!{e}"), inner.map(lambda e: f"-{e}"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(inner, st.sampled_from(["a", "b", "c"])).map(lambda t: f"{t[0]}.{t[1]}"),
        st.tuples(inner, st.sampled_from(["a", "b", "c"])).map(lambda t: f"has({t[0]}.{t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
        inner.map(lambda e: f"size({e})"), inner.map(lambda e: f"{e}.size()"),
        st.tuples(inner, st.sampled_from(["startsWith", "endsWith", "contains", "split", "join", "indexOf",
                                          "substring", "charAt", "lastIndexOf", "matches"]), inner)
        .map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        st.tuples(inner, st.sampled_from(["lowerAscii", "upperAscii", "trim", "join"])).map(
            lambda t: f"{t[0]}.{t[1]}()"),
        st.tuples(inner, st.sampled_from(["exists", "all", "exists_one", "filter", "map"]), inner)
        .map(lambda t: f"{t[0]}.{t[1]}(v, {t[2]})"),
        st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(inner, inner), max_size=2).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"),
    )


EXPRESSIONS = st.recursive(ATOMS, _composite, max_leaves=6)


@settings(max_examples=800)
@given(EXPRESSIONS, ACTIVATION)
@example("x.exists(v, v == \"a\")", {"x": ["a", 1], "y": None})
@example("x in [\"a\", 1]", {"x": "a", "y": None})
@example("x.y.a && false", {"x": {}, "y": None})
@example('true || (x.c && (x.a ? "" : [].join(",")) == "")', {"x": {}, "y": None})
def test_random_expressions_agree_with_cel_python(text: str, activation: dict[str, Any]) -> None:
    try:
        compile_expression(text)
    except CelCompileError:  # texts that do not compile are not this test's subject
        return
    agrees(text, activation)


# Mostly well-typed expressions over an activation of the shapes the gateway sees (strings, maps of strings,
# lists of strings), where the fast path answers most often; a value of another type now and then.
S = st.deferred(lambda: st.one_of(
    WORDS.map(cel_string), st.sampled_from(["s", "m.a", 'm["b"]', "l[0]", "v"]),
    st.tuples(S, S).map(lambda t: f"({t[0]} + {t[1]})"),
    st.tuples(B, S, S).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
    L.map(lambda e: f'{e}.join(",")'), S.map(lambda e: f"{e}.lowerAscii()"),
    S.map(lambda e: f"{e}.substring(1)")))
B = st.deferred(lambda: st.one_of(
    st.sampled_from(["true", "false", "b", "has(m.a)", "has(m.c)", "v"]),
    st.tuples(S, st.sampled_from(["==", "!=", "<", ">="]), S).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    st.tuples(S, L).map(lambda t: f"({t[0]} in {t[1]})"), S.map(lambda e: f"({e} in m)"),
    st.tuples(B, st.sampled_from(["&&", "||"]), B).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    B.map(lambda e: f"!{e}"), st.tuples(S, S).map(lambda t: f"{t[0]}.startsWith({t[1]})"),
    st.tuples(S, st.sampled_from(['"^a"', '"b+$"', '"."', '"\\\\-"', "s"])).map(lambda t: f"{t[0]}.matches({t[1]})"),
    st.tuples(st.sampled_from(["l", "m"]), st.sampled_from(["exists", "all"]), B).map(
        lambda t: f"{t[0]}.{t[1]}(v, {t[2]})"),
    L.map(lambda e: f"size({e}) > 1")))
L = st.deferred(lambda: st.one_of(
    st.sampled_from(["l", "[]"]), st.lists(S, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
    S.map(lambda e: f'{e}.split(",")')))
STRINGS_OR_OTHER = st.one_of(WORDS, WORDS, WORDS, JSON)
SHAPED = st.fixed_dictionaries({
    "s": STRINGS_OR_OTHER, "b": st.one_of(st.booleans(), st.booleans(), JSON),
    "m": st.one_of(st.dictionaries(st.sampled_from(["a", "b"]), STRINGS_OR_OTHER, max_size=2), JSON),
    "l": st.one_of(st.lists(STRINGS_OR_OTHER, max_size=3), JSON)})


@settings(max_examples=800)
@given(st.one_of(S, B, L), SHAPED)
@example('(true || (("".substring(1) in m) && ("" == (m.a.matches("^a") ? "" : [].join(",")))))',
         {"s": "", "b": False, "m": {}, "l": []})  # cel-python crashes there; the fast path must not answer
def test_well_typed_expressions_agree_with_cel_python(text: str, activation: dict[str, Any]) -> None:
    agrees(text, activation)


# --- hand-picked classes: each must take the fast path and agree -----------------------------------------

FAST_CASES: list[tuple[str, dict[str, Any]]] = [
    ('x != null', {"x": "a"}), ("x == null", {"x": None}), ('false && x.b', {"x": {}}),
    ('true || x.b', {"x": {}}), ('true ? "a" : x.b', {"x": {}}), ('has(x.a)', {"x": {"a": None}}),
    ('x in ["a", "b"]', {"x": "b"}), ('x in ["a", "b"]', {"x": None}), ('x in {"a": 1}', {"x": "a"}),
    ('x.exists(h, h.startsWith("x-"))', {"x": {"x-a": "1", "b": 2}}), ('x.exists(v, v == "a")', {"x": ["a", 1]}),
    ('size(x) == 5', {"x": "héllo"}), ('x.join(",")', {"x": ["a", "b"]}), ('x.split(",")', {"x": "a,b"}),
    ('x.substring(1)', {"x": "abc"}), ('x + 1', {"x": INT64 - 2}), ('[x, 1] == [x, 1]', {"x": "a"}),
    ('{"k": x, "l": [x]}', {"x": {"a": [1, None]}}), ('x.all(k, k != "c")', {"x": {"a": 1, "b": 2}}),
    ('x.all(v, v > 0)', {"x": []}), ('x[1]', {"x": ["a", "b"]}),
    ("'\\u00e9' == x", {"x": "é"}), ('x.matches("^[^/]*/granite\\\\-8b$")', {"x": "llm/granite-8b"}),
    ("x.matches(y)", {"x": "abc", "y": "b+"}), ('x.matches("^a")', {"x": "ba"}), ('x.exists(x, x == 1)', {"x": [1]}),
    ('x == 1.5', {"x": 1.5}),
]


@pytest.mark.parametrize(("text", "activation"), FAST_CASES)
def test_plain_cases_take_the_fast_path_and_agree(text: str, activation: dict[str, Any]) -> None:
    assert agrees(text, activation), f"{text!r} fell back to cel-python on {activation!r}"


UNSURE_CASES: list[tuple[str, dict[str, Any]]] = [
    # errors cel-python absorbs or raises: the fast path never guesses
    ("x.b && false", {"x": {}}), ("x.b || true", {"x": {}}), ("has(x.b.c)", {"x": {}}), ("has(x.b)", {"x": "s"}),
    # type mixes cel-python answers in its own way
    ("x == 1", {"x": True}), ("x == 1", {"x": "1"}), ('x in ["b", 1]', {"x": "a"}), ('x in "abc"', {"x": "a"}),
    ("x == 1.0", {"x": 1}), ("!x", {"x": 1}), ("x ? 1 : 2", {"x": "s"}), ("x.startsWith(\"a\")", {"x": 1}),
    # out of range: overflow, bad indexes, values that are not JSON data
    ("x + 1", {"x": INT64 - 1}), ("-x", {"x": -INT64}), ("x", {"x": INT64}), ("x.a == 1", {"x": {"a": -INT64 - 1}}),
    ("x[1]", {"x": ["a"]}),
    ("x[-1]", {"x": ["a"]}), ("x", {"x": (1, 2)}), ("x.substring(5)", {"x": "abc"}),
    ("x.matches(y)", {"x": "a", "y": "("}), ('{"a": 1, x: 2}', {"x": "a"}),
]


@pytest.mark.parametrize(("text", "activation"), UNSURE_CASES)
def test_doubtful_cases_are_left_to_cel_python(text: str, activation: dict[str, Any]) -> None:
    assert not agrees(text, activation), f"{text!r} answered on the fast path for {activation!r}"


@pytest.mark.parametrize("text", ['x.matches("(")', "matches(x, y)", "duration(x)", "x * 2", "x / 2", "3u", 'b"a" == x',
                                  "int(x)", ".x", "dyn(x)", "x.map(v, v, v)", "has(x)",
                                  "x.filter(v, v)", "x.map(v, v)", "x.exists_one(v, v)"])
def test_constructs_outside_the_subset_are_always_interpreted(text: str) -> None:
    assert compile_expression(text).fast is None


def test_results_are_fresh_plain_copies() -> None:
    data = {"x": {"a": [1, {"b": "c"}]}}
    result = compile_expression("x").evaluate(data)
    assert result == data["x"] and result is not data["x"] and result["a"] is not data["x"]["a"]
    with pytest.raises(Unsure):
        plain_result({1: "a"})
