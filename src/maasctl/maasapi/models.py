"""The model catalogue (`GET /v1/models`): MaaSModelRefs reachable through the caller's subscriptions,
filtered by probing each model's `/v1/models` with the caller's own Authorization header (seed 001).

A model is listed when its probe answers 2xx or 405. The caller's credentials go to the gateway only, and there
only to the model's own route (`probe_target`): never to a host a MaaSModelRef names, nor to another path on
the gateway (maas-api itself, another model). Probes run concurrently, each with its own timeout, under one
overall deadline; a slow or failing model is left out (fail closed) instead of failing the list.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from maasctl.contract.edge import AmbiguousPath, canonical_path
from maasctl.contract.origins import origin
from maasctl.contract.views import ModelRefView

# Marks maas-api's own probes. `/v1/models` refuses a request carrying it (508), so a probe that reaches
# maas-api anyway (a route nobody expected) ends there instead of probing again. Not `x-maas-*`: the gateway
# refuses those from clients.
PROBE_HEADER = "X-Model-Probe"
PROBE_HEADER_VALUE = "maas-api"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~/-]*")


def _matching_gateway(endpoint: str, gateway_origins: Sequence[str]) -> str | None:
    """The configured gateway URL whose origin (scheme, host, port; case and default port aside) `endpoint`
    is on, or None."""
    mine = origin(endpoint)
    if mine is None:
        return None
    return next((g for g in gateway_origins if origin(g) == mine), None)


def _within(endpoint_path: str, root: str) -> str | None:
    """`endpoint_path` in canonical form (the gateway's own `canonical_path`) when that is `root` or below
    it and made of plain characters only; else None. What is checked is what is sent, so dot segments,
    percent-escapes, repeated slashes or `;` cannot turn an accepted path into another route."""
    try:
        path = canonical_path(endpoint_path).rstrip("/")
    except (AmbiguousPath, UnicodeError):
        return None
    if not _PLAIN_PATH.fullmatch(path):
        return None
    return path if path == root or path.startswith(root + "/") else None


def probe_target(endpoint: str, gateway_origins: Sequence[str], gateway_path: str) -> tuple[str, bool]:
    """(probe URL, whether the caller's credentials may go with it).

    With a gateway configured the probe always goes to a configured gateway URL (its scheme, host and port as
    configured: user info, case or port spelling in a model's URL change nothing) and only to the model's own
    route there: `gateway_path` (e.g. `/<ns>/<name>`) or a path below it. Any other endpoint (another host,
    another path on the gateway such as `/maas-api`, a path that only normalises into the route) is replaced by
    `gateway_path` on the first gateway URL, so no user-written `endpointOverride` aims the caller's credentials
    at another host, maas-api itself or another model. Without a configured gateway the probe goes where the
    endpoint says, without credentials.
    """
    if not gateway_origins:
        parts = urlsplit(probe_url(endpoint))
        netloc = parts.netloc.rpartition("@")[2]  # userinfo in a model's URL is never sent anywhere
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), False
    matched = _matching_gateway(endpoint, gateway_origins)
    gateway = urlsplit(matched or gateway_origins[0])
    prefix = gateway.path.rstrip("/")
    root = prefix + gateway_path
    path = (_within(urlsplit(endpoint).path, root) if matched else None) or root
    return probe_url(urlunsplit((gateway.scheme, gateway.netloc, path, "", ""))), True


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
    sent[PROBE_HEADER] = PROBE_HEADER_VALUE
    try:
        r = await asyncio.wait_for(http.get(url, headers=sent), timeout)
    except (TimeoutError, httpx.HTTPError, httpx.InvalidURL, ValueError):  # a URL no client can send: not listed
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
    return [m for m, t in zip(models, tasks, strict=True)
            if t in done and not t.cancelled() and t.exception() is None and t.result()]
