"""An Event recorder (events.k8s.io/v1) that cannot flood the API server.

Guarantees: the first occurrence of an event (same object, type, reason, action and note) is written at
once; repeats within ``window`` seconds are counted locally and reported at most once per
``series_interval`` by patching the event's ``series``. Recording is best effort: API errors are logged,
never raised, so a failing event write cannot fail a reconcile.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from maasctl.runtime.client import Client
from maasctl.runtime.errors import ApiError, NotLeader
from maasctl.runtime.gvk import GroupVersionKind

__all__ = ["EVENT", "EventRecorder"]

EVENT = GroupVersionKind("events.k8s.io", "v1", "Event")
log = logging.getLogger(__name__)
_MAX_TRACKED = 4096


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class _Seen:
    name: str
    namespace: str
    first: float
    last_write: float
    count: int


class EventRecorder:
    """Records events about objects as ``controller`` (reportingController) / ``instance``."""

    def __init__(
        self,
        client: Client,
        *,
        controller: str,
        instance: str,
        window: float = 600.0,
        series_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._controller = controller
        self._instance = instance
        self._window = window
        self._series_interval = series_interval
        self._clock = clock
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self.writes = 0

    async def record(
        self,
        regarding: Mapping[str, Any],
        *,
        type_: Literal["Normal", "Warning"],
        reason: str,
        action: str,
        note: str = "",
    ) -> None:
        meta = regarding["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (str(meta.get("uid", meta["name"])), type_, reason, action, note)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.first < self._window:
            seen.count += 1
            self._seen.move_to_end(key)
            if now - seen.last_write >= self._series_interval:
                seen.last_write = now
                series = {"series": {"count": seen.count, "lastObservedTime": _micro_time()}}
                await self._write(self._client.patch(EVENT, seen.name, seen.namespace, series))
            return
        name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": action[:128],
            "reason": reason[:128],
            "type": type_,
            "note": note[:1024],
            "regarding": {
                k: v
                for k, v in {
                    "apiVersion": regarding.get("apiVersion"),
                    "kind": regarding.get("kind"),
                    "name": meta["name"],
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                }.items()
                if v
            },
        }
        self._seen[key] = _Seen(name, namespace, now, now, 1)
        while len(self._seen) > _MAX_TRACKED:
            self._seen.popitem(last=False)
        await self._write(self._client.create(body))

    async def _write(self, call: Any) -> None:
        try:
            await call
            self.writes += 1
        except (ApiError, NotLeader) as exc:
            log.warning("could not record event", extra={"error": str(exc)})
