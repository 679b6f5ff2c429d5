"""The model names a provider serves, asked once when an administrator imports it (`GET <endpoint>/models`).

The console holds the upstream key only while the import form is submitted (it is written into a Secret and never
read back), so that is when it asks; the names (not secret) are kept as an annotation of the service's Secret and
offered on the "Publish Models" page. The call is made from the console's network position, so it follows the
data plane's destination rule (`contract.destinations`), follows no redirect (a redirect could lead anywhere with
the key), and reads a bounded answer. A provider without a listing, or one that cannot be asked, only costs the
suggestion: typing a name still works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpx

from maasctl.console.catalog import MAX_PROVIDER_MODELS, is_provider_model_name
from maasctl.contract.destinations import destination_problem
from maasctl.contract.edge import provider_headers
from maasctl.tls import default_tls

__all__ = ["ProviderListing", "list_provider_models"]

MAX_BODY: Final = 1024 * 1024
TIMEOUT: Final = 5.0


@dataclass(frozen=True)
class ProviderListing:
    names: tuple[str, ...] = ()
    note: str = ""  # why there are none, for the administrator


def _names(body: bytes) -> tuple[str, ...]:
    try:
        data = json.loads(body)
    except ValueError:
        return ()
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return ()
    found = (str(i.get("id")) for i in items if isinstance(i, dict) and isinstance(i.get("id"), str))
    return tuple(sorted({n for n in found if is_provider_model_name(n)}))[:MAX_PROVIDER_MODELS]


async def list_provider_models(endpoint: str, key: str, namespace: str, *, provider: str = "openai",
                               api_format: str = "openai-chat") -> ProviderListing:
    """The provider's model ids (sorted, at most MAX_PROVIDER_MODELS), or none and why. Never raises, never logs
    the key."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ProviderListing(note="the endpoint is not an http(s) URL")
    problem = destination_problem(parts.hostname, namespace)
    if problem is not None:
        return ProviderListing(note=f"the console does not call {parts.hostname}: it {problem}")
    url = endpoint.rstrip("/") + "/models"
    headers = provider_headers(provider, api_format, key)  # as the gateway will call it (Anthropic: x-api-key)
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, verify=default_tls()) as http, \
                http.stream("GET", url, headers=headers) as resp:
            if resp.status_code != 200:
                return ProviderListing(note=f"the provider answered {resp.status_code} to GET /models")
            body = b""
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY:
                    return ProviderListing(note="the provider's model list is larger than 1 MiB")
    except httpx.HTTPError as exc:
        return ProviderListing(note=f"the provider could not be asked ({type(exc).__name__})")
    names = _names(body)
    return ProviderListing(names, "" if names else "the provider listed no models")
