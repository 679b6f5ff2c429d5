"""Finalizer add/remove that cannot clobber another controller's finalizer.

Expected flow: add the finalizer before creating any child or external state (that write re-enqueues the
object); on deletion, clean up, then remove it. Guarantees: both use a JSON patch whose ``test`` op pins the
list (add) or the exact entry (remove), so a concurrent change by another controller fails the patch
instead of being overwritten; ``add`` never adds to an object that is being deleted (the server would reject
it, and re-adding in the deletion path would block deletion forever).
Raises: ``ApiError`` subclasses from the server (a failed ``test`` is retried by the controller's backoff).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from maasctl.runtime.client import JSON_PATCH, Client
from maasctl.runtime.errors import NotFound
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.objects import FrozenObject, freeze, is_deleting, thaw

if TYPE_CHECKING:
    from maasctl.runtime.controller import Result

__all__ = ["add_finalizer", "finalize", "has_finalizer", "remove_finalizer"]


def has_finalizer(obj: Mapping[str, Any], name: str) -> bool:
    return name in ((obj.get("metadata") or {}).get("finalizers") or ())


async def add_finalizer(client: Client, obj: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """Add ``name``; returns the patched object, or None when nothing was written (present or deleting)."""
    if has_finalizer(obj, name) or is_deleting(obj):
        return None
    meta = obj["metadata"]
    current = thaw(meta.get("finalizers") or [])
    if current:
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": name},
        ]
    else:
        # No list yet: pin the whole object version so a concurrently added list is not replaced.
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers", "value": [name]},
        ]
    return await client.patch(
        GroupVersionKind.of(obj), meta["name"], meta.get("namespace"), ops, content_type=JSON_PATCH
    )


async def remove_finalizer(client: Client, obj: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """Remove ``name``; returns the patched object, or None if it was absent or the object is gone."""
    meta = obj["metadata"]
    current = list(meta.get("finalizers") or ())
    if name not in current:
        return None
    i = current.index(name)
    ops = [
        {"op": "test", "path": f"/metadata/finalizers/{i}", "value": name},
        {"op": "remove", "path": f"/metadata/finalizers/{i}"},
    ]
    try:
        return await client.patch(
            GroupVersionKind.of(obj), meta["name"], meta.get("namespace"), ops, content_type=JSON_PATCH
        )
    except NotFound:
        return None


async def finalize(
    client: Client,
    obj: FrozenObject,
    name: str,
    *,
    apply: Callable[[FrozenObject], Awaitable[Result]],
    cleanup: Callable[[FrozenObject], Awaitable[Result | None]],
) -> Result:
    """The one finalizer state machine (the shape of kube-rs `finalizer()`), so reconcilers only write the
    two halves:

    - live object without the finalizer: add it first (before any child or external state exists), then
      `apply` the object as patched;
    - live object: `apply(obj)` -> its Result;
    - deleting with the finalizer: `cleanup(obj)`; None means done (the finalizer is removed), a Result keeps
      the finalizer and is returned (e.g. requeue while a cleanup Job runs);
    - deleting without it: nothing to do.
    """
    from maasctl.runtime.controller import Result

    if is_deleting(obj):
        if not has_finalizer(obj, name):
            return Result.done()
        held = await cleanup(obj)
        if held is not None:
            return held
        await remove_finalizer(client, obj, name)
        return Result.done()
    if not has_finalizer(obj, name):
        patched = await add_finalizer(client, obj, name)
        if patched is not None:
            obj = freeze(patched)
    return await apply(obj)
