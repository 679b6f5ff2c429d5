"""One CEL environment for everything maasctl generates, evaluates or checks.

The controller checks every expression it emits with this environment before applying it, the local gateway
evaluates the same expressions with it, and the unit tests prove each builder's output against it, so the
three can never disagree about what compiles.

The environment is cel-python (`celpy`) plus the cel-go string extensions that Kuadrant offers both in
Authorino (`pkg/expressions/cel`) and in the wasm-shim: `split`, `join`, `lowerAscii`, `upperAscii`,
`replace`, `trim`, `indexOf`, `lastIndexOf`, `substring`, `charAt`. Only receiver-style calls
(`"a,b".split(",")`) are part of the contract, as in cel-go.

Guarantees:
- `compile_expression(text)` parses once and rejects calls to functions that neither CEL nor the extensions
  define (celpy alone would only notice at evaluation time), so "compiles" means "every call resolves".
- `Program.evaluate(activation)` takes plain JSON-like Python data and returns plain Python data
  (`bool`, `int`, `float`, `str`, `list`, `dict`, `None`); errors raise `CelEvaluationError`.
- `check_compiles(text)` answers exactly as `compile_expression` would, but texts that differ only in the
  string literals `cel_string` writes share one compilation (the controller checks one predicate per
  subscription and model, all of one shape).
- `cel_string(value)` renders any Python string as a CEL string literal that evaluates back to exactly that
  string, whatever it contains; builders use it for every value they interpolate.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import celpy
import celpy.celtypes as ct
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, base_functions

from maasctl.contract.celfast import FastProgram, Unsure, compile_tree

__all__ = [
    "EXTENSION_FUNCTIONS",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "Program",
    "cel_string",
    "cel_string_list",
    "check_compiles",
    "compile_expression",
    "literal_skeleton",
]


class CelError(Exception):
    """Base of the CEL errors; the message names the expression."""


class CelCompileError(CelError):
    """The text does not parse, or it calls a function the environment does not define."""


class CelEvaluationError(CelError):
    """Evaluation failed (missing field, wrong type, ...) or did not produce a value."""


# --- string extensions (cel-go `ext.Strings`, as shipped by Kuadrant) -------------------------------------


def _str(value: Any, fn: str) -> str:
    if not isinstance(value, str):
        raise CELEvalError(f"{fn}: expected string, got {type(value).__name__}")
    return str(value)


def _int(value: Any, fn: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CELEvalError(f"{fn}: expected int, got {type(value).__name__}")
    return int(value)


def _split(target: Any, sep: Any, limit: Any = None) -> ct.ListType:
    text, separator = _str(target, "split"), _str(sep, "split")
    n = -1 if limit is None else _int(limit, "split")
    if n == 0:
        return ct.ListType([])
    if separator == "":  # cel-go splits into code points
        parts = list(text)
        if n > 0 and len(parts) > n:
            parts = [*parts[: n - 1], "".join(parts[n - 1 :])]
    else:
        parts = text.split(separator) if n < 0 else text.split(separator, n - 1)
    return ct.ListType([ct.StringType(p) for p in parts])


def _join(target: Any, sep: Any = "") -> ct.StringType:
    if not isinstance(target, list):
        raise CELEvalError(f"join: expected list, got {type(target).__name__}")
    return ct.StringType(_str(sep, "join").join(_str(item, "join") for item in target))


def _lower_ascii(target: Any) -> ct.StringType:
    return ct.StringType("".join(c.lower() if c.isascii() else c for c in _str(target, "lowerAscii")))


def _upper_ascii(target: Any) -> ct.StringType:
    return ct.StringType("".join(c.upper() if c.isascii() else c for c in _str(target, "upperAscii")))


def _replace(target: Any, old: Any, new: Any, limit: Any = None) -> ct.StringType:
    n = -1 if limit is None else _int(limit, "replace")
    text = _str(target, "replace")
    return ct.StringType(text.replace(_str(old, "replace"), _str(new, "replace"), n))


def _trim(target: Any) -> ct.StringType:
    return ct.StringType(_str(target, "trim").strip())


def _index_of(target: Any, sub: Any, offset: Any = 0) -> ct.IntType:
    text, start = _str(target, "indexOf"), _int(offset, "indexOf")
    if not 0 <= start <= len(text):
        raise CELEvalError(f"indexOf: index out of range: {start}")
    return ct.IntType(text.find(_str(sub, "indexOf"), start))


def _last_index_of(target: Any, sub: Any, offset: Any = None) -> ct.IntType:
    text = _str(target, "lastIndexOf")
    end = len(text) if offset is None else _int(offset, "lastIndexOf")
    if not 0 <= end <= len(text):
        raise CELEvalError(f"lastIndexOf: index out of range: {end}")
    needle = _str(sub, "lastIndexOf")
    return ct.IntType(text.rfind(needle, 0, end + len(needle)))


def _substring(target: Any, start: Any, end: Any = None) -> ct.StringType:
    text = _str(target, "substring")
    lo = _int(start, "substring")
    hi = len(text) if end is None else _int(end, "substring")
    if not 0 <= lo <= hi <= len(text):
        raise CELEvalError(f"substring: index out of range: [{lo}, {hi}) of {len(text)}")
    return ct.StringType(text[lo:hi])


def _char_at(target: Any, index: Any) -> ct.StringType:
    text, i = _str(target, "charAt"), _int(index, "charAt")
    if not 0 <= i <= len(text):
        raise CELEvalError(f"charAt: index out of range: {i}")
    return ct.StringType(text[i : i + 1])


def _error_value(function: Callable[..., Any]) -> Callable[..., Any]:
    """Return a failure as a CEL error *value*, as cel-python's own functions do, so `false && f(...)` is
    false and `true || f(...)` true as in cel-go (a raised error would escape `&&`/`||` in cel-python)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except CELEvalError as exc:
            return exc

    return call


_EXTENSIONS: Final[dict[str, Callable[..., Any]]] = {
    "split": _split,
    "join": _join,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "replace": _replace,
    "trim": _trim,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
}

EXTENSION_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    name: _error_value(fn) for name, fn in _EXTENSIONS.items()
}
"""Kuadrant's string functions beyond standard CEL, by name."""

_MACROS: Final = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn"})
_KNOWN_FUNCTIONS: Final = frozenset(base_functions) | frozenset(EXTENSION_FUNCTIONS) | _MACROS


# --- literals -------------------------------------------------------------------------------------------

_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def cel_string(value: str) -> str:
    """A double-quoted CEL string literal whose value is exactly `value`.

    Every character outside printable ASCII is written as a `\\u`/`\\U` escape, so the literal is plain
    ASCII and nothing in `value` (quotes, backslashes, newlines, NUL) can end it early.
    """
    out = ['"']
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def cel_string_list(values: list[str] | tuple[str, ...]) -> str:
    """A CEL list literal of string literals (`["a", "b"]`)."""
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


# --- compile and evaluate -------------------------------------------------------------------------------


def _called_functions(tree: lark.Tree[Any]) -> Iterator[str]:
    """Names of all functions and macros the expression calls."""
    for node in tree.iter_subtrees():
        if node.data == "ident_arg" and node.children:
            yield str(node.children[0])
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            yield str(node.children[1])


def _to_python(value: Any) -> Any:
    """Convert celpy values to plain Python (bool before int: BoolType is an int)."""
    if isinstance(value, CELEvalError):
        raise CelEvaluationError(str(value.args[0]) if value.args else "evaluation error")
    if value is None:
        return None
    if isinstance(value, bool | ct.BoolType):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, Mapping):
        return {_to_python(k): _to_python(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_python(v) for v in value]
    raise CelEvaluationError(f"unsupported CEL result type {type(value).__name__}")


class Program:
    """A compiled expression, reusable for any number of evaluations.

    Plain cases run as compiled Python (`celfast`); whatever the fast path is unsure of is interpreted by
    cel-python, whose answer stands.
    """

    def __init__(self, text: str, runner: celpy.Runner, fast: FastProgram | None = None) -> None:
        self.text = text
        self._runner = runner
        self.fast = fast
        """The compiled fast path (None when the text uses constructs outside it); raises `Unsure`."""

    def __repr__(self) -> str:
        return f"Program({self.text!r})"

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate against JSON-like data, e.g. `{"auth": {...}, "request": {...}}`."""
        if self.fast is not None:
            try:
                return self.fast(activation)
            except Unsure:
                pass
        return self.interpret(activation)

    def interpret(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate with cel-python alone (the reference the fast path is held to)."""
        try:
            context = {name: json_to_cel(value) for name, value in activation.items()}
            result = self._runner.evaluate(context)
        except CELEvalError as exc:
            raise CelEvaluationError(f"{self.text!r}: {exc.args[0] if exc.args else exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, RecursionError) as exc:
            raise CelEvaluationError(f"{self.text!r}: {exc}") from exc
        return _to_python(result)

    def evaluate_bool(self, activation: Mapping[str, Any]) -> bool:
        """Evaluate a predicate; a non-bool result is an error, not a truthy value."""
        result = self.evaluate(activation)
        if not isinstance(result, bool):
            raise CelEvaluationError(f"{self.text!r}: predicate returned {type(result).__name__}, not bool")
        return result


@functools.cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.lru_cache(maxsize=8192)
def compile_expression(text: str) -> Program:
    """Compile `text` once (cached by text) in the maasctl CEL environment.

    Raises:
        CelCompileError: syntax error, or a call to an unknown function.
    """
    env = _environment()
    try:
        tree = env.compile(text)
    except (CELParseError, lark.exceptions.LarkError, RecursionError) as exc:
        raise CelCompileError(f"{text!r} does not parse: {exc}") from exc
    unknown = sorted({name for name in _called_functions(tree) if name not in _KNOWN_FUNCTIONS})
    if unknown:
        raise CelCompileError(f"{text!r} calls unknown function(s): {', '.join(unknown)}")
    return Program(text, env.program(tree, functions=dict(EXTENSION_FUNCTIONS)),
                   compile_tree(tree, EXTENSION_FUNCTIONS))


_PLAIN_LITERAL: Final = re.compile(r'"(?:[ !#-\[\]-~]|\\[\\"nrt]|\\u(?![dD][89abAB])[0-9a-fA-F]{4})*"')
"""A double-quoted literal of printable ASCII, the escapes `cel_string` writes and `\\u` escapes outside the
surrogate range: a valid CEL string literal whatever its content."""


def literal_skeleton(text: str) -> str | None:
    """`text` with every string literal replaced by `""`, or None unless each literal is a plain double-quoted
    one (`_PLAIN_LITERAL`) and nothing outside them could change how a quote is read: no single quote,
    backtick or comment, no prefix (`r"`, `b"`), no adjacent literals (as in a triple quote).

    Replacing one valid literal token by another keeps every other token, so the skeleton compiles exactly
    when `text` does.
    """
    out: list[str] = []
    pos = 0
    while True:
        quote = text.find('"', pos)
        between = text[pos:] if quote < 0 else text[pos:quote]
        if "'" in between or "`" in between or "//" in between:
            return None
        out.append(between)
        if quote < 0:
            return "".join(out)
        if quote and (text[quote - 1].isalnum() or text[quote - 1] in "_\\"):
            return None
        literal = _PLAIN_LITERAL.match(text, quote)
        if literal is None or text.startswith('"', literal.end()):
            return None
        out.append('""')
        pos = literal.end()


def check_compiles(text: str) -> None:
    """Raise `CelCompileError` exactly when `compile_expression(text)` would, compiling the literal skeleton
    (cached) instead of each text that differs only in its string literals.

    Raises:
        CelCompileError: with the message `compile_expression(text)` gives.
    """
    skeleton = literal_skeleton(text)
    if skeleton is not None and skeleton != text:
        try:
            compile_expression(skeleton)
        except CelCompileError:
            pass
        else:
            return
    compile_expression(text)
