"""A compiler from cel-python's parse tree to Python closures, for the plain cases of the CEL maasctl writes.

cel-python interprets the tree on every evaluation, after converting the whole activation to its own types;
an auth decision evaluates dozens of expressions at 0.3-0.9 ms each. The closures built here read the plain
JSON-like activation directly, but only along the path where the answer is beyond doubt: well-typed operands
(`str` with `str`, `int` with `int` inside int64, `bool` where a condition is due, ...), keys that exist,
indexes in range. Whenever an operand is anything else (a missing key, a type mix, an overflow, a value
that is not plain JSON data) the closure raises `Unsure`, and the caller evaluates the same text with
cel-python, whose answer (value or error) stands. So the fast path decides only cases cel-python decides the
same way; every error, and every quirk of cel-python, still comes from cel-python.

Constructs outside the covered subset (durations, arithmetic beyond `+` and `-`, bytes, unsigned
ints, messages, global calls other than `has` and `size`, and the macros `filter`, `map` and `exists_one`,
whose errors cel-python raises past an enclosing `||`) compile to `None`: the whole expression is then always
interpreted.

One difference is deliberate: cel-python converts the *entire* activation up front and fails when any part
of it is not JSON data (an int beyond int64, a set), even a part the expression never reads. The fast path
checks only what it reads and what it returns.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import celpy.celtypes as ct
import lark
import re2
from celpy.evaluation import CELEvalError, celstr

__all__ = ["FastProgram", "Unsure", "compile_tree", "plain_result"]

Scope = Mapping[str, Any]
"""Macro variables in scope (`h` in `headers.exists(h, ...)`)."""

Fn = Callable[[Mapping[str, Any], Scope], Any]

FastProgram = Callable[[Mapping[str, Any]], Any]
"""Evaluates against a JSON-like activation and returns plain data, or raises `Unsure`."""


class Unsure(Exception):
    """The fast path cannot be sure of the answer: interpret the expression instead."""


class _Unsupported(Exception):
    """The construct is outside the compiled subset (compile-time only)."""


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_NO_SCOPE: Final[Scope] = MappingProxyType({})
_RESERVED: Final = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type",
                              "type", "dyn", "google", "protobuf"})
"""Identifiers cel-python resolves as types or packages: always interpreted."""


# --- the value rules of the fast path -----------------------------------------------------------------


def _int(value: Any) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _check_int(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _equal(a: Any, b: Any) -> bool:
    """CEL `==` where both sides are of one kind (or a string meets null); anything else is unsure."""
    kind = type(a)
    if kind is type(b):
        if kind is str or kind is bool or a is None or kind is float:
            return bool(a == b)
        if kind is int:
            return _check_int(a) == _check_int(b)
        if kind is list:
            if len(a) != len(b):
                raise Unsure
            outcomes = [_equal(x, y) for x, y in zip(a, b, strict=True)]  # every pair, no short circuit
            return all(outcomes)
        raise Unsure
    if (a is None and type(b) is str) or (b is None and kind is str):
        return False
    raise Unsure


def _ordered(a: Any, b: Any) -> tuple[Any, Any]:
    kind = type(a)
    if kind is not type(b) or kind not in (str, int, float):
        raise Unsure
    if kind is int:
        _check_int(a)
        _check_int(b)
    return a, b


def _add(a: Any, b: Any) -> Any:
    kind = type(a)
    if kind is not type(b):
        raise Unsure
    if kind is str or kind is float:
        return a + b
    if kind is int:
        return _check_int(_int(a) + _int(b))
    if kind is list:
        return [*a, *b]
    raise Unsure


def _subtract(a: Any, b: Any) -> Any:
    kind = type(a)
    if kind is not type(b):
        raise Unsure
    if kind is float:
        return a - b
    if kind is int:
        return _check_int(_int(a) - _int(b))
    raise Unsure


def _ordering(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda a, b: bool(compare(*_ordered(a, b)))


_OPERATORS: Final[Mapping[str, Callable[[Any, Any], Any]]] = {
    "relation_eq": _equal,
    "relation_ne": lambda a, b: not _equal(a, b),
    "relation_lt": _ordering(operator.lt),
    "relation_le": _ordering(operator.le),
    "relation_gt": _ordering(operator.gt),
    "relation_ge": _ordering(operator.ge),
    "addition_add": _add,
    "addition_sub": _subtract,
}
"""The binary operators of the fast path by grammar rule (`in` has its own); `*`, `/` and `%` are not."""


def _str_keys(mapping: dict[Any, Any]) -> dict[Any, Any]:
    for key in mapping:
        if type(key) is not str:
            raise Unsure
    return mapping


def _items(collection: Any) -> list[Any]:
    """What a macro ranges over: a list's elements or a map's (string) keys."""
    if type(collection) is list:
        return collection
    if type(collection) is dict:
        return list(_str_keys(collection))
    raise Unsure


def plain_result(value: Any) -> Any:
    """A fresh copy of `value` as plain data, as cel-python's converted result would be (else `Unsure`)."""
    kind = type(value)
    if kind is str or kind is bool or kind is float or value is None:
        return value
    if kind is int:
        return _check_int(value)
    if kind is list:
        return [plain_result(v) for v in value]
    if kind is dict:
        return {k: plain_result(v) for k, v in _str_keys(value).items()}
    raise Unsure


def _from_extension(value: Any) -> Any:
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, list):
        return [_from_extension(v) for v in value]
    raise Unsure


# --- the compiler --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    fn: Fn
    constant: bool = False
    value: Any = None


def _const(value: Any) -> _Node:
    return _Node(lambda act, scope: value, True, value)


def _fold(node: _Node) -> _Node:
    """Evaluate a node whose inputs are all constants once; keep it dynamic if that is unsure."""
    try:
        return _const(node.fn(_NO_SCOPE, _NO_SCOPE))
    except Unsure:
        return node


def _children(tree: lark.Tree[Any]) -> list[Any]:
    return list(tree.children)


class _Compiler:
    def __init__(self, extensions: Mapping[str, Callable[..., Any]]) -> None:
        self.extensions = extensions

    def node(self, tree: Any) -> _Node:
        if not isinstance(tree, lark.Tree):
            raise _Unsupported(repr(tree))
        handler = getattr(self, f"_{tree.data}", None)
        if handler is None:
            raise _Unsupported(str(tree.data))
        result: _Node = handler(tree)
        return result

    def _single(self, tree: lark.Tree[Any]) -> _Node:
        kids = _children(tree)
        if len(kids) != 1:
            raise _Unsupported(str(tree.data))
        return self.node(kids[0])

    # pass-through levels of the grammar
    def _primary(self, tree: lark.Tree[Any]) -> _Node:
        return self._single(tree)

    def _paren_expr(self, tree: lark.Tree[Any]) -> _Node:
        return self._single(tree)

    # expr: or [or "?" or ":" expr]
    def _expr(self, tree: lark.Tree[Any]) -> _Node:
        kids = _children(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        if len(kids) != 3:
            raise _Unsupported("expr")
        cond, then, other = (self.node(k) for k in kids)
        cf, tf, of = cond.fn, then.fn, other.fn

        def ternary(act: Mapping[str, Any], scope: Scope) -> Any:
            c = cf(act, scope)
            if c is True:
                return tf(act, scope)
            if c is False:
                return of(act, scope)
            raise Unsure

        return _Node(ternary)

    def _conditionalor(self, tree: lark.Tree[Any]) -> _Node:
        return self._logical(tree, decides=True)

    def _conditionaland(self, tree: lark.Tree[Any]) -> _Node:
        return self._logical(tree, decides=False)

    def _logical(self, tree: lark.Tree[Any], decides: bool) -> _Node:
        """`||` (a true left side decides) or `&&` (a false one does); both sides must be bools."""
        kids = _children(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        lf, rf = self.node(kids[0]).fn, self.node(kids[1]).fn
        passes = not decides
        look_anyway = _hazardous(kids[1])

        def logical(act: Mapping[str, Any], scope: Scope) -> bool:
            left = lf(act, scope)
            if left is decides:
                if look_anyway:
                    rf(act, scope)  # Unsure where cel-python might crash (see `_hazardous`)
                return not passes
            if left is not passes:
                raise Unsure
            right = rf(act, scope)
            if right is True or right is False:
                return right
            raise Unsure

        return _Node(logical)

    def _binary(self, tree: lark.Tree[Any]) -> tuple[str, _Node, _Node] | None:
        """(operator rule, left, right) of `relation`/`addition`/`multiplication`, or None for one child."""
        kids = _children(tree)
        if len(kids) == 1:
            return None
        if len(kids) != 2 or not isinstance(kids[0], lark.Tree) or len(kids[0].children) != 1:
            raise _Unsupported(str(tree.data))
        return str(kids[0].data), self.node(kids[0].children[0]), self.node(kids[1])

    def _operation(self, tree: lark.Tree[Any]) -> _Node:
        """`relation`, `addition` and `multiplication`: one operator with two operands, or one child."""
        parts = self._binary(tree)
        if parts is None:
            return self._single(tree)
        op, left, right = parts
        if op == "relation_in":
            return self._in(left, right)
        function = _OPERATORS.get(op)
        if function is None:
            raise _Unsupported(op)
        lf, rf = left.fn, right.fn

        def operation(act: Mapping[str, Any], scope: Scope) -> Any:
            return function(lf(act, scope), rf(act, scope))

        node = _Node(operation)
        return _fold(node) if left.constant and right.constant else node

    _relation = _addition = _multiplication = _operation

    @staticmethod
    def _in(item: _Node, container: _Node) -> _Node:
        lf, rf = item.fn, container.fn
        if container.constant and type(container.value) is list and all(
                type(v) is str for v in container.value):
            strings = frozenset(container.value)

            def in_strings(act: Mapping[str, Any], scope: Scope) -> bool:
                value = lf(act, scope)
                if type(value) is str:
                    return value in strings
                if value is None:
                    return False
                raise Unsure

            return _Node(in_strings)

        def member_of(act: Mapping[str, Any], scope: Scope) -> bool:
            value, within = lf(act, scope), rf(act, scope)
            if type(within) is list:
                return any(_equal(value, element) for element in within)  # stops at the first match
            if type(within) is dict and type(value) is str:
                return value in _str_keys(within)
            raise Unsure

        return _Node(member_of)

    def _unary(self, tree: lark.Tree[Any]) -> _Node:
        kids = _children(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        if len(kids) != 2 or not isinstance(kids[0], lark.Tree):
            raise _Unsupported("unary")
        operand = self.node(kids[1])
        of = operand.fn
        fn: Fn
        if kids[0].data == "unary_not":
            def fn(act: Mapping[str, Any], scope: Scope) -> bool:
                value = of(act, scope)
                if value is True or value is False:
                    return not value
                raise Unsure
        elif kids[0].data == "unary_neg":
            def fn(act: Mapping[str, Any], scope: Scope) -> Any:
                value = of(act, scope)
                if type(value) is float:
                    return -value
                return _check_int(-_int(value))
        else:
            raise _Unsupported(str(kids[0].data))
        node = _Node(fn)
        return _fold(node) if operand.constant else node

    def _member(self, tree: lark.Tree[Any]) -> _Node:
        return self._single(tree)

    def _member_dot(self, tree: lark.Tree[Any]) -> _Node:
        inner, name = _children(tree)
        of, field = self.node(inner).fn, str(name)

        def select(act: Mapping[str, Any], scope: Scope) -> Any:
            obj = of(act, scope)
            if type(obj) is dict and field in obj:
                return obj[field]
            raise Unsure

        return _Node(select)

    def _member_index(self, tree: lark.Tree[Any]) -> _Node:
        inner, index = _children(tree)
        of, xf = self.node(inner).fn, self.node(index).fn

        def item(act: Mapping[str, Any], scope: Scope) -> Any:
            obj, key = of(act, scope), xf(act, scope)
            if type(obj) is dict and type(key) is str and key in obj:
                return obj[key]
            if type(obj) is list and type(key) is int and 0 <= key < len(obj):
                return obj[key]
            raise Unsure

        return _Node(item)

    def _ident(self, tree: lark.Tree[Any]) -> _Node:
        name = str(_children(tree)[0])
        if name in _RESERVED:
            raise _Unsupported(name)

        def variable(act: Mapping[str, Any], scope: Scope) -> Any:
            if name in scope:
                return scope[name]
            if name in act:
                return act[name]
            raise Unsure

        return _Node(variable)

    def _literal(self, tree: lark.Tree[Any]) -> _Node:
        token = _children(tree)[0]
        kind = token.type
        try:
            if kind in ("STRING_LIT", "MLSTRING_LIT"):
                return _const(str(celstr(token)))
            if kind == "INT_LIT":
                return _const(_check_int(int(ct.IntType(token.value))))
            if kind == "FLOAT_LIT":
                return _const(float(ct.DoubleType(token.value)))
        except (ValueError, Unsure) as exc:
            raise _Unsupported(f"literal {token.value!r}") from exc
        if kind == "BOOL_LIT":
            return _const(token.value.lower() == "true")
        if kind == "NULL_LIT":
            return _const(None)
        raise _Unsupported(kind)  # bytes, unsigned ints

    def _list_lit(self, tree: lark.Tree[Any]) -> _Node:
        kids = _children(tree)
        elements = [self.node(e) for e in kids[0].children] if kids else []
        if all(e.constant for e in elements):
            return _const([e.value for e in elements])
        fns = [e.fn for e in elements]
        return _Node(lambda act, scope: [f(act, scope) for f in fns])

    def _map_lit(self, tree: lark.Tree[Any]) -> _Node:
        kids = _children(tree)
        inits = [self.node(e) for e in kids[0].children] if kids else []
        pairs = list(zip(inits[::2], inits[1::2], strict=True))

        def build(act: Mapping[str, Any], scope: Scope) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, value in pairs:
                k = key.fn(act, scope)
                if type(k) is not str or k in out:
                    raise Unsure
                out[k] = value.fn(act, scope)
            return out

        if all(k.constant and v.constant for k, v in pairs):
            try:
                return _const(build(_NO_SCOPE, _NO_SCOPE))
            except Unsure as exc:
                raise _Unsupported("map literal") from exc
        return _Node(build)

    def _args(self, tree: lark.Tree[Any], at: int) -> list[Any]:
        kids = _children(tree)
        return list(kids[at].children) if len(kids) > at and kids[at] is not None else []

    def _ident_arg(self, tree: lark.Tree[Any]) -> _Node:
        name = str(_children(tree)[0])
        args = self._args(tree, 1)
        if name == "has" and len(args) == 1:
            return self._has(args[0])
        if name == "size" and len(args) == 1:
            return self._size(self.node(args[0]))
        raise _Unsupported(name)

    def _has(self, arg: Any) -> _Node:
        target = arg
        while isinstance(target, lark.Tree) and target.data != "member_dot" and len(target.children) == 1:
            target = target.children[0]
        if not isinstance(target, lark.Tree) or target.data != "member_dot":
            raise _Unsupported("has")
        inner, name = _children(target)
        of, field = self.node(inner).fn, str(name)

        def has(act: Mapping[str, Any], scope: Scope) -> bool:
            obj = of(act, scope)
            if type(obj) is dict:
                return field in obj
            raise Unsure

        return _Node(has)

    @staticmethod
    def _size(of_node: _Node) -> _Node:
        of = of_node.fn

        def size(act: Mapping[str, Any], scope: Scope) -> int:
            value = of(act, scope)
            if type(value) in (str, list, dict):
                return len(value)
            raise Unsure

        return _Node(size)

    def _member_dot_arg(self, tree: lark.Tree[Any]) -> _Node:
        receiver, name = self.node(_children(tree)[0]), str(_children(tree)[1])
        args = self._args(tree, 2)
        if name in ("exists", "all", "exists_one", "filter", "map"):
            return self._macro(name, receiver, args)
        if name == "size" and not args:
            return self._size(receiver)
        if name in ("startsWith", "endsWith", "contains") and len(args) == 1:
            return self._string_test(name, receiver, self.node(args[0]))
        if name == "matches" and len(args) == 1:
            return self._matches(receiver, self.node(args[0]))
        if name in self.extensions:
            return self._extension(self.extensions[name], receiver, [self.node(a) for a in args])
        raise _Unsupported(name)

    @staticmethod
    def _string_test(name: str, receiver: _Node, arg: _Node) -> _Node:
        rf, af = receiver.fn, arg.fn
        test: Callable[[str, str], bool] = {"startsWith": str.startswith, "endsWith": str.endswith,
                                            "contains": str.__contains__}[name]

        def string_test(act: Mapping[str, Any], scope: Scope) -> bool:
            text, other = rf(act, scope), af(act, scope)
            if type(text) is str and type(other) is str:
                return test(text, other)
            raise Unsure

        return _Node(string_test)

    @staticmethod
    def _matches(receiver: _Node, pattern: _Node) -> _Node:
        """RE2 search, with the engine cel-python uses (`google-re2`); a constant pattern compiles once."""
        rf, pf = receiver.fn, pattern.fn
        fixed: Any = None
        if pattern.constant and type(pattern.value) is str:
            try:
                fixed = re2.compile(pattern.value)
            except re2.error as exc:
                raise _Unsupported("invalid pattern") from exc

        def matches(act: Mapping[str, Any], scope: Scope) -> bool:
            text = rf(act, scope)
            if type(text) is not str:
                raise Unsure
            if fixed is not None:
                return fixed.search(text) is not None
            regex = pf(act, scope)
            if type(regex) is not str:
                raise Unsure
            try:
                return re2.search(regex, text) is not None
            except re2.error as exc:
                raise Unsure from exc

        return _Node(matches)

    @staticmethod
    def _extension(function: Callable[..., Any], receiver: _Node, args: list[_Node]) -> _Node:
        fns = [receiver.fn, *(a.fn for a in args)]

        def call(act: Mapping[str, Any], scope: Scope) -> Any:
            values = [f(act, scope) for f in fns]
            for value in values:
                if type(value) not in (str, int, list):
                    raise Unsure
            try:
                return _from_extension(function(*values))
            except (CELEvalError, TypeError, ValueError) as exc:
                raise Unsure from exc

        return _Node(call)

    def _macro(self, name: str, receiver: _Node, args: list[Any]) -> _Node:
        if name not in ("exists", "all"):
            raise _Unsupported(name)  # cel-python raises errors inside these: an outer `||` would not absorb them
        if len(args) != 2:
            raise _Unsupported(f"{name} with {len(args)} arguments")
        var = self._variable_name(args[0])
        rf, pf = receiver.fn, self.node(args[1]).fn
        stop_at: bool = name == "exists"  # `exists` stops at the first true, `all` at the first false
        go_on: bool = not stop_at

        def quantifier(act: Mapping[str, Any], scope: Scope) -> bool:
            inner = dict(scope)
            for element in _items(rf(act, scope)):
                inner[var] = element
                outcome = pf(act, inner)
                if outcome is stop_at:
                    return not go_on
                if outcome is not go_on:
                    raise Unsure
            return go_on

        return _Node(quantifier)

    @staticmethod
    def _variable_name(tree: Any) -> str:
        node = tree
        while isinstance(node, lark.Tree) and node.data != "ident" and len(node.children) == 1:
            node = node.children[0]
        if not isinstance(node, lark.Tree) or node.data != "ident":
            raise _Unsupported("macro variable")
        name = str(node.children[0])
        if name in _RESERVED:
            raise _Unsupported(name)
        return name


def _hazardous(tree: Any) -> bool:
    """Whether `tree` holds a conditional with an empty list or map literal in a branch. cel-python evaluates
    the right side of a decided `&&`/`||` too, and crashes ("pop from empty list") on such a conditional under an
    `&&`/`||` whose left side is an error: where the fast path would skip such a side, it evaluates it as well,
    and any doubt there (an error is one) leaves the answer to cel-python."""
    if not isinstance(tree, lark.Tree):
        return False
    for node in tree.iter_subtrees():
        if node.data == "expr" and len(node.children) == 3 and any(
                isinstance(branch, lark.Tree) and any(
                    inner.data in ("list_lit", "map_lit") and not inner.children for inner in branch.iter_subtrees())
                for branch in node.children[1:]):
            return True
    return False


def compile_tree(tree: lark.Tree[Any], extensions: Mapping[str, Callable[..., Any]]) -> FastProgram | None:
    """The fast path of a parsed expression, or None when it uses anything outside the compiled subset."""
    try:
        root = _Compiler(extensions).node(tree)
    except (_Unsupported, RecursionError):
        return None
    fn = root.fn

    def run(activation: Mapping[str, Any]) -> Any:
        try:
            return plain_result(fn(activation, _NO_SCOPE))
        except RecursionError as exc:
            raise Unsure from exc

    return run
