"""The model catalogue (`GET /v1/models`): MaaSModelRefs reachable through the caller's subscriptions,
filtered by probing each model's `/v1/models` with the caller's own Authorization header (seed 001).

A model is listed when its probe answers 2xx or 405. The caller's credentials go to the gateway only
(`probe_target`): never to a host a MaaSModelRef names. Probes run concurrently, each with its own timeout,
under one overall deadline; a slow or failing model is left out (fail closed) instead of failing the list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from maasctl.contract.views import ModelRefView


def _origin(url: str) -> tuple[str, str, int] | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.scheme, parts.hostname.lower(), port


def probe_target(endpoint: str, gateway_origins: Sequence[str], gateway_path: str | None = None) -> tuple[str, bool]:
    """(probe URL, whether the caller's credentials may go with it).

    The caller's Authorization header is sent to the gateway only: a model endpoint on a configured gateway
    origin is probed as is; for any other origin (a user-written `endpointOverride`, a status URL) the model
    is probed where the gateway serves it (`gateway_path`, e.g. `/<ns>/<name>`) on the first gateway origin, so
    no host taken from a MaaSModelRef ever receives credentials (no SSRF). Without a configured gateway the
    probe goes where the endpoint says, without credentials.
    """
    parts = urlsplit(probe_url(endpoint))
    netloc = parts.netloc.rpartition("@")[2]  # userinfo in a model's URL is never sent anywhere
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    allowed = {o for o in (_origin(g) for g in gateway_origins) if o is not None}
    if _origin(url) in allowed:
        return url, True
    if not gateway_origins:
        return url, False
    path = probe_url(gateway_path) if gateway_path else parts.path
    return gateway_origins[0].rstrip("/") + path, True


def gateway_path(model: ModelRefView) -> str:
    """Where the gateway serves a model: `/<ns>/<MaaSModelRef>` for ExternalModels (the generated route),
    `/<ns>/<LLMInferenceService>` for KServe's route."""
    name = model.target if model.kind == "LLMInferenceService" and model.target else model.name
    return f"/{model.namespace}/{name}"


def probe_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"


async def probe(
    http: httpx.AsyncClient,
    model: ModelRefView,
    headers: Mapping[str, str],
    timeout: float,
    gateway_origins: Sequence[str] = (),
) -> bool:
    """True when the model answers the caller's request with 2xx or 405 within `timeout`."""
    if not model.endpoint:
        return False
    url, with_credentials = probe_target(model.endpoint, gateway_origins, gateway_path(model))
    credentials = ("authorization", "x-api-key")
    sent = dict(headers) if with_credentials else {k: v for k, v in headers.items() if k.lower() not in credentials}
    try:
        r = await asyncio.wait_for(http.get(url, headers=sent), timeout)
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
    gateway_origins: Sequence[str] = (),
) -> list[ModelRefView]:
    """The subset of `models` whose probes succeed before the overall `deadline` (order preserved)."""
    if not models:
        return []
    tasks = [asyncio.create_task(probe(http, m, headers, per_probe, gateway_origins)) for m in models]
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return [m for m, t in zip(models, tasks, strict=True) if t in done and not t.cancelled() and t.result()]
