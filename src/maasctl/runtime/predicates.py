"""Event filters for controllers: a predicate returns True when an event should enqueue a request.

Predicates only filter events; the reconciler stays level-based and reads the cache, never the event.
"""

from __future__ import annotations

from collections.abc import Callable

from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import is_deleting

__all__ = [
    "Predicate",
    "all_of",
    "annotations_changed",
    "any_of",
    "deletion",
    "generation_changed",
    "labels_changed",
    "negate",
    "resource_version_changed",
]

Predicate = Callable[[Event], bool]


def _meta_changed(event: Event, field: str) -> bool:
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    return bool(event.old["metadata"].get(field) != event.obj["metadata"].get(field))


def generation_changed(event: Event) -> bool:
    """Pass creates, deletes, and updates that changed ``metadata.generation`` (spec changes).

    Caveat: status-only writes do not pass, so a wiped status is not healed until the next spec change.
    Setting deletionTimestamp bumps generation, so the start of a deletion passes.
    """
    return _meta_changed(event, "generation")


def resource_version_changed(event: Event) -> bool:
    """Drop resync events (old and new have the same resourceVersion)."""
    return _meta_changed(event, "resourceVersion")


def labels_changed(event: Event) -> bool:
    return _meta_changed(event, "labels")


def annotations_changed(event: Event) -> bool:
    return _meta_changed(event, "annotations")


def deletion(event: Event) -> bool:
    """Pass deletes, and updates where the object is being deleted (deletionTimestamp set)."""
    if event.type is EventType.DELETED:
        return True
    return event.type is EventType.UPDATED and is_deleting(event.obj)


def all_of(*preds: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in preds)


def any_of(*preds: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in preds)


def negate(pred: Predicate) -> Predicate:
    return lambda event: not pred(event)
