"""Event filters for controllers: a predicate returns True when an event should enqueue a request.

Predicates only filter events; the reconciler stays level-based and reads the cache, never the event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import FrozenObject, is_deleting

__all__ = [
    "SPEC_OR_META",
    "Predicate",
    "all_of",
    "annotations_changed",
    "any_of",
    "deletion",
    "generation_changed",
    "labels_changed",
    "negate",
    "not_observed",
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


def not_observed(obj: FrozenObject) -> bool:
    """True while an object's status does not report its current generation (``status.observedGeneration``), or
    it is being deleted: work its controller has not done yet. For ``ControllerBuilder.for_(unfinished=...)``,
    only for kinds whose reconciler writes ``observedGeneration``."""
    if is_deleting(obj):
        return True
    status = obj.get("status")
    observed = status.get("observedGeneration") if isinstance(status, Mapping) else None
    return observed is None or observed != obj["metadata"].get("generation")


def all_of(*preds: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in preds)


def any_of(*preds: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in preds)


def negate(pred: Predicate) -> Predicate:
    return lambda event: not pred(event)


SPEC_OR_META: Predicate = any_of(generation_changed, deletion, labels_changed, annotations_changed)
"""The usual filter of a primary kind: what its owner changed (spec, labels, annotations) or a deletion, not
the status its own controller writes."""
