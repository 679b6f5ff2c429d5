"""The model catalogue (`GET /v1/models`): MaaSModelRefs reachable through the caller's subscriptions,
filtered by probing each model's `/v1/models` with the caller's own Authorization header (seed 001).

A model is listed when its probe answers 2xx or 405. Probes run concurrently, each with its own timeout,
under one overall deadline; a slow or failing model is left out (fail closed) instead of failing the list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import httpx

from maasctl.contract.views import ModelRefView


def probe_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"


async def probe(
    http: httpx.AsyncClient,
    model: ModelRefView,
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
    models: Sequence[ModelRefView],
    headers: Mapping[str, str],
    *,
    per_probe: float,
    deadline: float,
) -> list[ModelRefView]:
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
