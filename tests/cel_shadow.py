"""Every CEL evaluation in the test suite is also run through cel-python alone: a fast-path answer
(`celfast`) that differs from cel-python's fails the test that caused it, so the whole suite (builders, the
gateway in-process, billing) doubles as a differential test of the compiled path."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from maasctl.contract.cel import CelEvaluationError, Program
from maasctl.contract.celfast import Unsure

_EVALUATE = Program.evaluate
_INTERPRET = Program.interpret


def typed(value: Any) -> Any:
    """A form in which equal means equal value *and* type (True is not 1, 1.0 is not 1, nan is nan)."""
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), typed(v)) for k, v in value.items()))
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def disagreement(program: Program, activation: Mapping[str, Any]) -> str | None:
    """What the fast path answered that cel-python does not, or None (also when the fast path is unsure)."""
    if program.fast is None:
        return None
    try:
        got = program.fast(activation)
    except Unsure:
        return None
    try:
        want = _INTERPRET(program, activation)
    except CelEvaluationError as exc:
        return f"{program.text!r}: fast path {got!r}, cel-python error {exc}"
    if typed(got) != typed(want):
        return f"{program.text!r}: fast path {got!r}, cel-python {want!r}"
    return None


@pytest.fixture(autouse=True)
def cel_fast_path_agrees_with_cel_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    found: list[str] = []

    def evaluate(self: Program, activation: Mapping[str, Any]) -> Any:
        problem = disagreement(self, activation)
        if problem is not None:
            found.append(problem)
        return _EVALUATE(self, activation)

    monkeypatch.setattr(Program, "evaluate", evaluate)
    yield
    assert not found, "the compiled CEL path disagreed with cel-python:\n" + "\n".join(found[:10])


@pytest.fixture
def cel_interpreted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts cel-python had to interpret during the test (the fast path was unsure or lacks them)."""
    texts: list[str] = []

    def interpret(self: Program, activation: Mapping[str, Any]) -> Any:
        texts.append(self.text)
        return _INTERPRET(self, activation)

    monkeypatch.setattr(Program, "interpret", interpret)
    return texts
