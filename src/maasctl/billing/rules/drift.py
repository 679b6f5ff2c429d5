"""Has someone edited a generated object? A pure comparison of the live object with what the compiler wants.

Two kinds of edit count as drift:
- a value the compiler sets is different or missing (server-side defaults are ignored: the desired object
  only has to be *contained* in the live one);
- an entry was added to a map whose entries carry meaning, like a policy's `limits` or `rules.authorization`
  (defaulting never adds entries there). Those entries are removed again by `removal_patch`, because a
  server-side apply only restores the fields the compiler owns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["ENTRY_MAPS", "differences", "removal_patch"]

Path = tuple[str, ...]
_RULES: Final = ("spec", "overrides", "rules")
ENTRY_MAPS: Final[Mapping[str, tuple[Path, ...]]] = {
    "AuthPolicy": (("spec",), ("spec", "overrides"), _RULES, (*_RULES, "authentication"), (*_RULES, "metadata"),
                   (*_RULES, "authorization"), (*_RULES, "callbacks"), (*_RULES, "response", "success", "headers"),
                   (*_RULES, "response", "success", "filters")),
    "RateLimitPolicy": (("spec",), ("spec", "overrides"), ("spec", "overrides", "limits")),
    "TokenRateLimitPolicy": (("spec",), ("spec", "overrides"), ("spec", "overrides", "limits")),
    "ClusterQueue": (),
}


def _changed(live: Any, desired: Any, path: Path, out: list[str]) -> None:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            out.append(".".join(path) + " changed")
            return
        for key, value in desired.items():
            if key not in live:
                out.append(".".join((*path, key)) + " removed")
            else:
                _changed(live[key], value, (*path, key), out)
    elif isinstance(desired, list | tuple):
        if not isinstance(live, list | tuple) or len(live) != len(desired) or any(
                _differs(a, b) for a, b in zip(live, desired, strict=True)):
            out.append(".".join(path) + " changed")
    elif isinstance(desired, bool) or isinstance(live, bool):
        if live is not desired:
            out.append(".".join(path) + " changed")
    elif live != desired:
        out.append(".".join(path) + " changed")


def _differs(live: Any, desired: Any) -> bool:
    found: list[str] = []
    _changed(live, desired, ("x",), found)
    return bool(found)


def _at(obj: Mapping[str, Any], path: Path) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _extra_entries(live: Mapping[str, Any], desired: Mapping[str, Any], kind: str) -> list[Path]:
    out: list[Path] = []
    for path in ENTRY_MAPS.get(kind, ()):
        have, want = _at(live, path), _at(desired, path)
        if isinstance(have, Mapping) and isinstance(want, Mapping):
            out.extend((*path, key) for key in have if key not in want)
    return out


def differences(live: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """What was edited in `live` relative to `desired` (empty: no drift), as `spec.a.b changed|removed|added`."""
    found: list[str] = []
    _changed(live.get("spec"), desired.get("spec"), ("spec",), found)
    labels = (desired.get("metadata") or {}).get("labels") or {}
    live_labels = (live.get("metadata") or {}).get("labels") or {}
    found += [f"metadata.labels.{k} changed" for k, v in labels.items() if live_labels.get(k) != v]
    found += [".".join(p) + " added" for p in _extra_entries(live, desired, str(desired.get("kind")))]
    return found


def removal_patch(live: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch deleting the entries added to `live`'s meaningful maps, or None when there are none."""
    extra: Sequence[Path] = _extra_entries(live, desired, str(desired.get("kind")))
    if not extra:
        return None
    patch: dict[str, Any] = {}
    for path in extra:
        node = patch
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = None
    return patch
