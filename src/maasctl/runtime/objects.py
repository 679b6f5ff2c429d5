"""Helpers for objects as plain JSON data: read-only freezing, thawing, keys and canonical form.

Objects in the shared cache are frozen (``MappingProxyType`` for maps, tuples for lists) so a reconciler
cannot mutate state that other controllers see; ``thaw`` returns a private, mutable deep copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "FrozenObject",
    "canonical",
    "freeze",
    "frozen_loads",
    "is_deleting",
    "key_of",
    "labels_match",
    "thaw",
]

FrozenObject = Mapping[str, Any]


_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """A deep read-only view: dicts become ``MappingProxyType``, lists become tuples.

    Every cached object passes through here once per version (most of a cache sync's CPU after decoding), so
    the exact JSON types are tested first by identity; subclasses of dict and list still freeze."""
    t = type(value)
    if t is dict:
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if t is list:
        return tuple([freeze(v) for v in value])
    if t in _SCALARS:
        return value
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple([freeze(v) for v in value])
    return value


def _frozen_list(value: list[Any]) -> tuple[Any, ...]:
    out = tuple(value)
    if list in map(type, out):  # a list of lists: its maps are frozen already, its lists not yet
        return tuple([_frozen_list(v) if type(v) is list else v for v in out])
    return out


_EMPTY_MAP: MappingProxyType[str, Any] = MappingProxyType({})


def _frozen_map(pairs: list[tuple[str, Any]]) -> MappingProxyType[str, Any]:
    if not pairs:  # most maps in a managedFields entry are empty leaves ("f:name": {}): one shared read-only map
        return _EMPTY_MAP
    return MappingProxyType({k: _frozen_list(v) if type(v) is list else v for k, v in pairs})


def frozen_loads(data: bytes | str) -> Any:
    """``freeze(json.loads(data))``, built while parsing: the parser hands each map's members to a hook (inner
    maps first), which freezes the map and its lists, so the document is walked once instead of twice (a cache
    sync decodes every object of every watched kind; this took a third off decoding and freezing them)."""
    value = json.loads(data, object_pairs_hook=_frozen_map)
    return _frozen_list(value) if type(value) is list else value


def thaw(value: Any) -> Any:
    """A deep mutable copy of a (possibly frozen) JSON value: mappings become dicts, sequences lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def key_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects), the cache and queue key."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """True once the server set ``deletionTimestamp`` (finalizers are running)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def labels_match(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    """Equality-based label selection: every selector label is present with the same value."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def canonical(value: Any) -> Any:
    """Drop nulls and empty maps/lists recursively, as the server does, so comparisons are stable.

    Sending ``creationTimestamp: null`` or ``items: []`` turns a no-op apply into a write (upstream issues
    kubernetes/kubernetes#131175, controller-runtime#1356); canonical objects avoid that.
    """
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            c = canonical(v)
            if c is None or (isinstance(c, dict | list) and not c):
                continue
            out[k] = c
        return out
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value if v is not None]
    return value
