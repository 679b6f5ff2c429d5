"""The provider relay: the payload processor's HTTP listener that serves models with several providers behind
Envoy (docs/providers.md, "Several providers for one model").

Envoy calls ext_proc once per request, and its own retries cannot change the key, the format or the body, so a
model with several providers is routed (its generated HTTPRoute's backendRef) here, and this listener makes the
attempts (`gateway.providers.ProviderCaller`, the same code the local gateway runs in process), answering Envoy in
OpenAI Chat with `x-maas-provider` naming the provider that served. The processor's response stages read that
header into the usage record and remove it; metering, limits and guardrails stay the processor's post stage's:
the relay records and charges nothing.

Never an open proxy:
- only `POST /v1/chat/completions` (`contract.providers.RELAY_PATH`), only with the relay token the processor's
  post stage sets on a request it admitted (`x-maas-relay-token`, compared in constant time; a client cannot send
  it: `x-maas-*` is refused at the edge); anything else is 403/404 before a byte goes anywhere;
- the destinations are the plan of the route named by `x-maas-relay-route`, from this process's own informer
  cache (the routes the controller generated, the plan decoded and re-checked against the destination rule):
  never a URL, host or key from the request;
- every caller credential and server-decided header is removed before a provider is called (the key set is the
  provider's own, from its Secret); the provider's key never reaches the answer, a log or a metric.
A NetworkPolicy lets only the Gateway's Envoy pods reach this port (manifests/base/payload-processor).

A provider's stream that breaks after its head ends this answer abruptly (the connection is closed without the
last chunk), as an upstream reset would: Envoy resets the stream and the processor settles it as cut.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

import aiohttp

from maasctl.contract.edge import HOP_BY_HOP, normalized_name, server_decided
from maasctl.contract.errors import Refusal
from maasctl.contract.providers import PROVIDER_HEADER, RELAY_PATH, RELAY_ROUTE_HEADER, RELAY_TOKEN_HEADER
from maasctl.dataplane.charge import completion_ceiling
from maasctl.gateway.pool import WORKER_REQUESTS
from maasctl.gateway.server import _BodyTooLarge, _read_body, disconnected

__all__ = ["ProviderRelay"]

log = logging.getLogger("maasctl.payload")


async def _refuse(send: Any, refusal: Refusal, provider: str = "") -> None:
    body = refusal.body
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in refusal.headers.items()]
    if provider:
        headers.append((PROVIDER_HEADER.encode(), provider.encode()))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ProviderRelay:
    """ASGI app over the processor's data plane (`gateway.server.Gateway` used as the plane: its route table,
    Secret cache, provider caller and settings)."""

    def __init__(self, plane: Any, taken: Any = None) -> None:
        self.plane = plane
        self.taken = taken if taken is not None else WORKER_REQUESTS.labels("0")  # this worker's requests

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        plane = self.plane
        self.taken.inc()
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        lookup = dict(headers)
        token = lookup.get(RELAY_TOKEN_HEADER, "")
        if not hmac.compare_digest(token.encode(), plane.pipeline.relay_token.encode()):
            log.warning("provider relay: a request without the processor's token refused")
            await _refuse(send, Refusal(403, "relay_forbidden", "the provider relay serves the gateway only"))
            return
        if scope["method"] != "POST" or scope["path"] != RELAY_PATH:
            await _refuse(send, Refusal(404, "route_not_found", "the provider relay serves chat completions only"))
            return
        route = lookup.get(RELAY_ROUTE_HEADER, "")
        rule = plane.state.snapshot().table.relayed(route)
        if rule is None or rule.providers is None:
            await _refuse(send, Refusal(404, "route_not_found", "no model with several providers on this route"))
            return
        try:
            body = await _read_body(receive, plane.settings.max_request_bytes)
        except _BodyTooLarge:
            await _refuse(send, Refusal(413, "body_too_large", "request body too large"))
            return
        except ConnectionResetError:
            return
        forwarded = [(k, v) for k, v in headers if k not in HOP_BY_HOP and not server_decided(k)
                     and not normalized_name(k).startswith("x-maas-")]  # the subscription choice too
        timeout = rule.timeout if rule.timeout is not None else plane.settings.upstream_timeout
        answer, refusal, provider = await plane.providers.call(
            rule.route_key, rule.namespace, rule.providers, body, forwarded,
            ceiling=completion_ceiling(rule.completion_ceiling, plane.settings.completion_ceiling),
            timeout=timeout or None)
        name = provider.name if provider is not None else ""
        if answer is None:
            await _refuse(send, refusal or Refusal(503, "upstream_unavailable", "no provider answered"), name)
            return
        try:
            out = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers
                   if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
            out.append((PROVIDER_HEADER.encode(), name.encode()))
            await send({"type": "http.response.start", "status": answer.status, "headers": out})
            # Envoy resets the connection when its client leaves: stop reading the provider's stream then
            gone = asyncio.get_running_loop().create_task(disconnected(receive))
            try:
                async for chunk in answer.chunks():
                    if gone.done():
                        return
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("provider relay: %s's answer broke: %s", name, type(exc).__name__)
                raise ConnectionAbortedError("the provider's answer broke off") from None  # closes the connection
            finally:
                gone.cancel()
            await send({"type": "http.response.body", "body": b""})
        finally:
            answer.release()

