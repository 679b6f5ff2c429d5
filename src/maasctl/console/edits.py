"""Writing back what an administrator edited in a form: a full update guarded by what they saw.

The form carries a `fingerprint` of the object it was filled from (spec, labels, annotations). A save writes the
object read at save time with the form's fields set, under that read's resourceVersion. A controller writing
status (or a finalizer) between the read and the write makes the API server answer 409 although nothing the
administrator saw changed: that write is retried on a fresh read. A change of what they saw is refused
(`Edited`), never written over.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from maasctl.console.kube import KubeError, Resource, UserKube

__all__ = ["ATTEMPTS", "Edited", "fingerprint", "replace_as_seen"]

ATTEMPTS = 4  # status writes come from one controller, a few per change: more would be a loop, not a race


class Edited(Exception):
    """Someone changed what the form shows since it was filled (or deleted the object)."""


def fingerprint(obj: Mapping[str, Any]) -> str:
    """What an administrator sees and edits of an object (spec, labels, annotations), hashed: the form sends it
    back, and a save refuses to write over an object whose fingerprint changed since."""
    meta = obj.get("metadata") or {}
    seen = {"spec": obj.get("spec"), "labels": meta.get("labels"), "annotations": meta.get("annotations")}
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:32]


def _conflict(exc: KubeError) -> bool:
    return exc.status == 409 and exc.reason == "Conflict"


async def replace_as_seen(kube: UserKube, res: Resource, base: Mapping[str, Any], seen: str,
                          build: Callable[[Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Replace the object with `build(base)`; on a 409 re-read it and, while its fingerprint is still `seen`,
    build and write again on the fresh read. Returns what the API server stored.

    Raises:
        Edited: the object's spec, labels or annotations changed, or it is gone.
        KubeError: any other refusal, or a conflict that outlasted `ATTEMPTS` writes.
    """
    meta = base.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), meta.get("namespace")
    edited = Edited(f"{res.kind} {name} was changed or deleted by someone else meanwhile")
    if fingerprint(base) != seen:
        raise edited
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await kube.replace(res, build(base))
        except KubeError as exc:
            if not _conflict(exc) or attempt == ATTEMPTS:
                raise
        fresh = await kube.find(res, name, namespace)
        if fresh is None or fingerprint(fresh) != seen:
            raise edited
        base = fresh
    raise AssertionError("unreachable: the last attempt returns or raises")
