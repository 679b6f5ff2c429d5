"""Header maps and header mutations of the ext_proc protocol, for both ends of the stream.

The processor answers with the *difference* between the headers Envoy sent and the ones the stages left, so a
stage edits a plain header list and never an Envoy message. The Envoy side applies a mutation the way Envoy's
default `HeaderMutationRules` do: removals first, then sets; `host`, `:authority`, `:scheme`, `:method` and
`x-envoy-*` are never changed and no `:` header is removed (rejected mutations are ignored, as Envoy does
without `disallow_is_error`). Values travel as `raw_value` (what Envoy sends since 1.27); `value` is read too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

__all__ = ["apply_mutation", "diff", "from_map", "header", "mutation", "to_map"]

_FIXED: Final = frozenset({"host", ":authority", ":scheme", ":method"})
_OVERWRITE: Final = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_APPEND: Final = base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD


def _value(h: Any) -> str:
    return bytes(h.raw_value).decode("latin-1") if h.raw_value else str(h.value)


def from_map(header_map: Any) -> list[tuple[str, str]]:
    """An Envoy HeaderMap as (lowercased name, value) pairs in order."""
    return [(h.key.lower(), _value(h)) for h in header_map.headers]


def to_map(headers: Iterable[tuple[str, str]]) -> Any:
    return base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1"))
                                       for k, v in headers])


def header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k == name), None)


def _mutable(name: str) -> bool:
    return name not in _FIXED and not name.startswith("x-envoy-")


def diff(before: Sequence[tuple[str, str]], after: Sequence[tuple[str, str]]) -> Any | None:
    """The HeaderMutation turning `before` into `after` (pseudo-headers other than `:path` are left alone,
    the fixed ones always); None when nothing changes."""
    old: dict[str, list[str]] = {}
    new: dict[str, list[str]] = {}
    for k, v in before:
        old.setdefault(k, []).append(v)
    for k, v in after:
        new.setdefault(k, []).append(v)
    sets: list[tuple[str, str, bool]] = []
    for name, values in new.items():
        if old.get(name) != values and _mutable(name) and (not name.startswith(":") or name == ":path"):
            sets.extend((name, v, i > 0) for i, v in enumerate(values))
    removes = [name for name in old if name not in new and _mutable(name) and not name.startswith(":")]
    return mutation(sets, removes) if sets or removes else None


def mutation(sets: Iterable[tuple[str, str, bool]], removes: Iterable[str] = ()) -> Any:
    """A HeaderMutation: (name, value, append) sets and removed names."""
    return pb.HeaderMutation(
        set_headers=[base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1")),
                                                append_action=_APPEND if append else _OVERWRITE)
                     for k, v, append in sets],
        remove_headers=list(removes))


def apply_mutation(headers: list[tuple[str, str]], m: Any) -> list[tuple[str, str]]:
    """Envoy's application of a HeaderMutation to a header list (a new list; rejected entries ignored)."""
    out = list(headers)
    for name in m.remove_headers:
        name = name.lower()
        if _mutable(name) and not name.startswith(":"):
            out = [(k, v) for k, v in out if k != name]
    for option in m.set_headers:
        name, value = option.header.key.lower(), _value(option.header)
        if not _mutable(name):
            continue
        present = any(k == name for k, _ in out)
        action = option.append_action
        if action == base_pb2.HeaderValueOption.ADD_IF_ABSENT and present:
            continue
        if action == base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS and not present:
            continue
        if action in (_OVERWRITE, base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS) and present:
            at = next(i for i, (k, _) in enumerate(out) if k == name)
            out = [(k, v) for k, v in out if k != name]
            out.insert(min(at, len(out)), (name, value))
        else:
            out.append((name, value))
    return out
