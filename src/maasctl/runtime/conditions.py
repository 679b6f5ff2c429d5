"""Status conditions with Kubernetes semantics (metav1.Condition).

Guarantees: ``set_condition`` returns a new list (input untouched); ``lastTransitionTime`` changes only when
``status`` changes; ``observedGeneration`` is recorded; other condition types keep their order.
Raises: ValueError for a status other than True/False/Unknown or a reason the API server would reject.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["find_condition", "is_true", "now_rfc3339", "remove_condition", "set_condition"]

_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_STATUSES = frozenset({"True", "False", "Unknown"})


def now_rfc3339() -> str:
    """The current time as metav1.Time (seconds precision, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    *,
    type_: str,
    status: str,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``type_`` set; ``now`` (RFC 3339) is injectable for tests."""
    if status not in _STATUSES:
        raise ValueError(f"condition status must be True, False or Unknown, not {status!r}")
    if not (1 <= len(reason) <= 1024 and _REASON.match(reason)):
        raise ValueError(f"invalid condition reason {reason!r}")
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions or ():
        if cond.get("type") != type_:
            out.append(dict(cond))
            continue
        found = True
        changed = cond.get("status") != status
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": (now or now_rfc3339()) if changed else cond.get("lastTransitionTime"),
        }
        if new["lastTransitionTime"] is None:
            new["lastTransitionTime"] = now or now_rfc3339()
        if observed_generation is not None:
            new["observedGeneration"] = observed_generation
        out.append(new)
    if not found:
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": now or now_rfc3339(),
        }
        if observed_generation is not None:
            new["observedGeneration"] = observed_generation
        out.append(new)
    return out


def remove_condition(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> list[dict[str, Any]]:
    return [dict(c) for c in conditions or () if c.get("type") != type_]
