"""Server-side apply with a no-op guard: an unchanged desired object causes no request at all.

The guard compares the canonical desired object with the cached live object: the set of leaf fields our
field manager owns (from the cached ``managedFields`` entry, which the cache keeps for our managers) must
equal the desired object's leaf fields, and every desired value must be present in the live object.
When both hold, applying would change nothing, so the PATCH is skipped.

Only the fields our manager owns are compared, so another controller writing the object (Kuadrant
accepting a policy, a gateway accepting an HTTPRoute: a status write) costs no apply.

Caveats: lists and atomic maps are compared as whole leaves; a mismatch there only costs a (server-side
no-op) PATCH, never a missed write. The cached object may lag our own writes, so the guard trusts it only
once it shows the version our last write (object or status) returned or a later one: resourceVersions are
compared as numbers when both are decimal integers (etcd revisions; comparable by contract since Kubernetes
1.35, KEP-5504), else only equality counts and a foreign write costs one (server-side no-op) apply.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from maasctl.runtime.client import Client
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.objects import FrozenObject, canonical, key_of

if TYPE_CHECKING:
    from maasctl.runtime.cache import Cache

__all__ = ["Applier", "Change", "is_unchanged", "leaf_paths", "owned_paths"]

Path = tuple[str, ...]
_IDENTITY: frozenset[Path] = frozenset({("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")})


class Change(enum.Enum):
    """What one apply did to the object on the server."""

    CREATED = "Created"
    UPDATED = "Updated"
    NONE = "None"  # skipped by the guard, or a PATCH the server found to be a no-op (same resourceVersion)


def leaf_paths(value: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Paths to every non-map value (scalars and lists are leaves)."""
    out: set[Path] = set()
    for k, v in value.items():
        path = (*prefix, k)
        if isinstance(v, Mapping) and v:
            out |= leaf_paths(v, path)
        else:
            out.add(path)
    return out


def owned_paths(fields_v1: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Leaf paths of a managedFields ``fieldsV1`` set.

    A node with list members (``k:``/``v:``/``i:``) is a leaf: lists are compared whole.
    """
    out: set[Path] = set()
    for k, v in fields_v1.items():
        if not k.startswith("f:"):
            continue
        path = (*prefix, k[2:])
        children = [c for c in (v or {}) if c != "."]
        if not children or any(not c.startswith("f:") for c in children):
            out.add(path)
        else:
            out |= owned_paths(v, path)
    return out


def _contains(live: Any, desired: Any) -> bool:
    """True when ``desired`` is present in ``live`` (maps by subset; lists elementwise, same length)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            _contains(live[k], v) if k in live else _is_empty(v) for k, v in desired.items()
        )
    if isinstance(desired, list | tuple):
        return (
            isinstance(live, list | tuple)
            and len(live) == len(desired)
            and all(_contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    if isinstance(desired, bool) or isinstance(live, bool):
        return live is desired
    return bool(live == desired)


def _is_empty(value: Any) -> bool:
    """An empty map or list: the server may omit it, so a missing field satisfies it."""
    return isinstance(value, Mapping | list | tuple) and not value


def is_unchanged(
    desired: Mapping[str, Any], live: Mapping[str, Any], field_manager: str, subresource: str | None = None
) -> bool:
    """True when applying ``desired`` as ``field_manager`` to ``live`` would change nothing.

    Empty maps and lists in ``desired`` count as fields (they are sent, and some APIs give them meaning).
    """
    want = without_nulls(desired)
    entry = None
    for e in (live.get("metadata") or {}).get("managedFields") or ():
        if (
            e.get("manager") == field_manager
            and e.get("operation") == "Apply"
            and (e.get("subresource") or None) == subresource
            and e.get("apiVersion") == want.get("apiVersion")
        ):
            entry = e
            break
    if entry is None:
        return False
    if leaf_paths(want) - _IDENTITY != owned_paths(entry.get("fieldsV1") or {}) - _IDENTITY:
        return False
    return _contains(live, want)


def _not_older(cached: str, written: str) -> bool:
    """True when the cached resourceVersion is the written one or (both being etcd revisions) a later one."""
    if cached == written:
        return True
    if cached.isdigit() and written.isdigit():
        return int(cached) > int(written)
    return False


def without_nulls(value: Any) -> Any:
    """A plain copy of `value` without null members (empty maps and lists are kept)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [without_nulls(v) for v in value if v is not None]
    return value


class Applier:
    """Applies desired objects with fixed field managers, skipping writes the cache shows are no-ops.

    ``writes`` and ``skipped`` count what happened (useful in tests and logs); ``status_writes`` is the part
    of ``writes`` that went to the /status subresource.
    """

    def __init__(self, client: Client, cache: Cache, *, field_manager: str, status_field_manager: str) -> None:
        self._client = client
        self._cache = cache
        self.field_manager = field_manager
        self.status_field_manager = status_field_manager
        self._written: dict[tuple[GroupVersionKind, str], str] = {}
        self.writes = 0
        self.status_writes = 0
        self.skipped = 0

    async def apply(self, desired: Mapping[str, Any]) -> Mapping[str, Any]:
        """Apply the object (not its status); returns the live object (cached when skipped)."""
        return (await self._apply(desired, self.field_manager, None))[0]

    async def apply_change(self, desired: Mapping[str, Any]) -> Change:
        """Apply the object (not its status) and say what that did.

        Decided per call (not from the counters, which concurrent reconciles move), and against our own last
        write when the cache has not seen it yet: applying again before the cache catches up is no creation.
        """
        return (await self._apply(desired, self.field_manager, None))[1]

    async def apply_status(self, desired: Mapping[str, Any]) -> Mapping[str, Any]:
        """Apply ``desired["status"]`` through the /status subresource with the status field manager."""
        return (await self._apply(desired, self.status_field_manager, "status"))[0]

    async def _apply(
        self, desired: Mapping[str, Any], manager: str, sub: str | None
    ) -> tuple[Mapping[str, Any], Change]:
        want = canonical(desired)
        gvk = GroupVersionKind.of(want)
        meta = want["metadata"]
        written_key = (gvk, key_of(want))
        live: FrozenObject | None = self._cache.peek(gvk, meta["name"], meta.get("namespace"))
        last = self._written.get(written_key)
        known = last  # the newest resourceVersion we know of: our last write, or the cache when it is newer
        if live is not None:
            live_version = str(live["metadata"].get("resourceVersion", ""))
            fresh = last is None or _not_older(live_version, last)
            if fresh:
                known = live_version
                self._written.pop(written_key, None)  # the cache caught up; later versions are newer still
            if fresh and is_unchanged(desired, live, manager, sub):
                self.skipped += 1
                return live, Change.NONE
        # Send empty maps and lists as written: some APIs give `{}` a meaning (e.g. an AuthPolicy's
        # `kubernetesTokenReview: {}` selects the method); only nulls are dropped.
        result = await self._client.apply(without_nulls(desired), field_manager=manager, subresource=sub)
        self.writes += 1
        if sub == "status":
            self.status_writes += 1
        version = str(result["metadata"].get("resourceVersion", ""))
        self._written[written_key] = version
        if known is None:
            return result, Change.CREATED
        return result, Change.NONE if version == known else Change.UPDATED
