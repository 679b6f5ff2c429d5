"""Find and compile every CEL text in a generated object, before it is applied.

Generated CEL that does not compile is a controller bug, and the data plane would only report it later as
`Enforced=False`/`InvalidCelExpression`. The controller runs `check_cel` on each desired AuthPolicy and
TokenRateLimitPolicy with the same environment the local gateway evaluates them with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from maasctl.contract.cel import CelCompileError, check_compiles

__all__ = ["cel_texts", "check_cel"]

_CEL_KEYS: Final = frozenset({"predicate", "expression"})


def cel_texts(obj: Mapping[str, Any]) -> list[str]:
    """Every `predicate` and `expression` string under `spec`, in document order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in _CEL_KEYS and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list | tuple):  # tuple: a cached (frozen) object
            for item in node:
                walk(item)

    walk(obj.get("spec", {}))
    return found


def check_cel(obj: Mapping[str, Any]) -> None:
    """Compile every CEL text of `obj`.

    Raises:
        CelCompileError: listing every text that does not compile (not just the first).
    """
    errors: list[str] = []
    for text in cel_texts(obj):
        try:
            check_compiles(text)
        except CelCompileError as exc:
            errors.append(str(exc))
    if errors:
        meta = obj.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
        raise CelCompileError(f"{obj.get('kind', 'object')} {name}: " + "; ".join(errors))
