"""Hold a subscription's first status for a new generation while only our own rendering lags behind.

A new (or changed) subscription is often reconciled before the model reconciler has put its limit into the
model's shared TokenRateLimitPolicy. Writing then says "not rendered yet", and the policy's update writes the
status again moments later: a third of the subscriptions were written twice at 300 (issue 39). So while its
models are all valid and one's policy is missing or lacks this subscription's limit, the first status of the
generation waits, at most ``HOLD_SECONDS``. The policy's update re-queues a held subscription at once
(``only_held``: the other subscriptions on it get that update settled for a second), and the deadline makes a
render that never comes visible all the same. Nothing else is held: a problem of the subscription itself, a
model not found, Kuadrant's verdict, and every later status are written as they are seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from maasctl.reconcilers.indexes import POLICY_NOT_FOUND
from maasctl.reconcilers.status import ModelOutcome
from maasctl.runtime import Request
from maasctl.runtime.controller import MapFunc
from maasctl.runtime.objects import FrozenObject

HOLD_SECONDS = 5.0
LIMIT_NOT_RENDERED = "LimitNotRendered"
"""The policy exists but does not carry the subscription's limit yet."""
OWN_RENDER_PENDING = frozenset({POLICY_NOT_FOUND, LIMIT_NOT_RENDERED})


def own_render_pending(outcomes: Sequence[ModelOutcome]) -> bool:
    """Every model valid, and one whose generated policy does not carry the subscription yet (our work, not
    Kuadrant's). A model with a problem is reported at once."""
    return all(o.ok for o in outcomes) and any(
        o.generated is not None and o.generated_reason in OWN_RENDER_PENDING for o in outcomes)


class FirstStatusHold:
    """Per object: when its current generation was first seen unreported. One entry per held object."""

    def __init__(self, seconds: float = HOLD_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._first_seen: dict[tuple[str, str], tuple[int, float]] = {}

    def remaining(self, obj: Mapping[str, Any], outcomes: Sequence[ModelOutcome]) -> float | None:
        """Seconds to wait before writing the status, or None: write it now."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        generation = int(meta.get("generation", 0))
        reported = (obj.get("status") or {}).get("observedGeneration") == generation
        if reported or not own_render_pending(outcomes):
            self._first_seen.pop(key, None)
            return None
        now = self._clock()
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != generation:
            seen = self._first_seen[key] = (generation, now)
        left = seen[1] + self.seconds - now
        return left if left > 0 else None

    def forget(self, namespace: str, name: str) -> None:
        """The status was written, or the object is gone."""
        self._first_seen.pop((namespace, name), None)

    def __len__(self) -> int:
        return len(self._first_seen)

    def __contains__(self, req: Request) -> bool:
        return (req.namespace or "", req.name) in self._first_seen


def only_held(map_to: MapFunc, hold: FirstStatusHold) -> MapFunc:
    """``map_to`` narrowed to the objects whose first status is being held; not run at all while none is (the
    settled watch on the same kind runs the same lookup: once a backlog is reported, each event pays it once)."""

    def held(obj: FrozenObject) -> list[Request]:
        if not hold:
            return []
        return [req for req in map_to(obj) if req in hold]

    return held
