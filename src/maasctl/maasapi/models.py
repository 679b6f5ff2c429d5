"""The model catalogue (`GET /v1/models`): MaaSModelRefs reachable through the caller's subscriptions,
filtered by probing each model's `/v1/models` with the caller's own Authorization header (seed 001).

A model is listed when its probe answers 2xx or 405. Probes run concurrently, each with its own timeout,
under one overall deadline; a slow or failing model is left out (fail closed) instead of failing the list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import httpx


@dataclass(frozen=True)
class ModelInfo:
    """The fields of a MaaSModelRef that the catalogue needs."""

    namespace: str
    name: str
    kind: str
    model_id: str  # status.resolvedModelAlias, else the object name
    endpoint: str | None
    phase: str
    created: int = 0

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ready(self) -> bool:
        return self.phase == "Ready" and bool(self.endpoint)


@runtime_checkable
class ModelSource(Protocol):
    """Where MaaSModelRefs come from (the controller's informer cache in production)."""

    async def list_models(self) -> Sequence[ModelInfo]: ...


class StaticModelSource:
    def __init__(self, models: Sequence[ModelInfo] = ()) -> None:
        self.models = list(models)

    async def list_models(self) -> Sequence[ModelInfo]:
        return list(self.models)


def _created(ts: Any) -> int:
    if not isinstance(ts, str):
        return 0
    try:
        return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def model_from_object(obj: Mapping[str, Any]) -> ModelInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name", ""))
    return ModelInfo(
        namespace=str(meta.get("namespace", "")),
        name=name,
        kind=str((spec.get("modelRef") or {}).get("kind", "")),
        model_id=str(status.get("resolvedModelAlias") or name),
        endpoint=status.get("endpoint") or None,
        phase=str(status.get("phase") or "Pending"),
        created=_created(meta.get("creationTimestamp")),
    )


def probe_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"


async def probe(
    http: httpx.AsyncClient,
    model: ModelInfo,
    headers: Mapping[str, str],
    timeout: float,
) -> bool:
    """True when the model answers the caller's request with 2xx or 405 within `timeout`."""
    if not model.endpoint:
        return False
    try:
        r = await asyncio.wait_for(http.get(probe_url(model.endpoint), headers=dict(headers)), timeout)
    except (TimeoutError, httpx.HTTPError):
        return False
    return 200 <= r.status_code < 300 or r.status_code == 405


async def accessible(
    http: httpx.AsyncClient,
    models: Sequence[ModelInfo],
    headers: Mapping[str, str],
    *,
    per_probe: float,
    deadline: float,
) -> list[ModelInfo]:
    """The subset of `models` whose probes succeed before the overall `deadline` (order preserved)."""
    if not models:
        return []
    tasks = [asyncio.create_task(probe(http, m, headers, per_probe)) for m in models]
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return [m for m, t in zip(models, tasks, strict=True) if t in done and not t.cancelled() and t.result()]
