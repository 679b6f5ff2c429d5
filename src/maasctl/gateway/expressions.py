"""Compiled value sources and predicates shared by the auth and rate-limit interpreters.

Kuadrant policies express values three ways, `{value}`, `{selector}` (a dotted path into the request/auth
context, as Authorino's well-known attributes) and `{expression}` (CEL), and conditions as `when:
[{predicate}]`. Everything is compiled once per policy generation (`compile_expression` also caches by text),
so the request path only evaluates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maasctl.contract.cel import CelError, Program, compile_expression

__all__ = ["PolicyError", "Predicates", "ValueSource", "lookup", "predicates", "value_source"]


class PolicyError(ValueError):
    """A policy uses a feature or expression the local gateway cannot interpret."""


def lookup(data: Mapping[str, Any], path: str) -> Any:
    """`a.b.c` into nested mappings (None when any step is missing)."""
    current: Any = data
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return None
        current = current[part]
    return current


def _compile(text: str) -> Program:
    try:
        return compile_expression(text)
    except CelError as exc:
        raise PolicyError(str(exc)) from exc


@dataclass(frozen=True)
class ValueSource:
    """One `{value | selector | expression}`."""

    value: Any = None
    selector: str | None = None
    program: Program | None = None

    def get(self, activation: Mapping[str, Any]) -> Any:
        """The value (raises `CelEvaluationError` when the expression fails)."""
        if self.program is not None:
            return self.program.evaluate(activation)
        if self.selector is not None:
            return lookup(activation, self.selector)
        return self.value


def value_source(spec: Mapping[str, Any]) -> ValueSource:
    if "expression" in spec:
        return ValueSource(program=_compile(str(spec["expression"])))
    if "selector" in spec:
        return ValueSource(selector=str(spec["selector"]))
    if "value" in spec:
        return ValueSource(value=spec["value"])
    raise PolicyError(f"value needs one of value, selector or expression: {dict(spec)!r}")


@dataclass(frozen=True)
class Predicates:
    """`when` conditions: all must hold (an empty list always holds)."""

    programs: tuple[Program, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.programs)

    def holds(self, activation: Mapping[str, Any]) -> bool:
        """True when every predicate is true; evaluation errors propagate (`CelEvaluationError`)."""
        return all(p.evaluate_bool(activation) for p in self.programs)

    def first_false(self, activation: Mapping[str, Any]) -> str | None:
        """The text of the first predicate that does not hold (for explanations)."""
        for p in self.programs:
            if not p.evaluate_bool(activation):
                return p.text
        return None


def predicates(items: Sequence[Mapping[str, Any]] | None) -> Predicates:
    out = []
    for item in items or ():
        if "predicate" not in item:
            raise PolicyError(f"when entry without predicate: {dict(item)!r} (selector patterns are not supported)")
        out.append(_compile(str(item["predicate"])))
    return Predicates(tuple(out))
