"""The local gateway as Envoy + Authorino + Limitador in front of a payload processor (`--payload-processor`).

Per request, in the filter chain's order: read the body (Envoy buffers it for the pre filter), the pre filter
over gRPC (edge guard, body routing: a header or `:path` change re-matches the route), the pipeline's `envoy`
stages here (route, auth, request limits, TRLP validity, backend), Authorino's success headers and
`x-maas-identity` added, the post filter over gRPC (metering, reservation, guardrails, provider key, rename), the
router (the route's path rewrite and hostname), then the response through the post filter chunk by chunk. The
processor settles and records; this process records nothing. A processor error is Envoy's with
failure_mode_allow false: 500 (504 on a message timeout) before the head, a cut stream after it - never a
request served unprocessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
import httpx
from multidict import CIMultiDict
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from maasctl.contract.edge import AmbiguousPath, canonical_path
from maasctl.contract.errors import error_body
from maasctl.dataplane.routing import is_base_inference_path
from maasctl.gateway.pipeline import Exchange
from maasctl.payload.envoy import (
    BUFFER_LIMIT,
    FilterStream,
    Immediate,
    ProcessorFailure,
    ResponseHead,
    channel,
    open_filter,
)
from maasctl.payload.modes import POST, PRE

__all__ = ["ProcessorFront"]

log = logging.getLogger("maasctl.gateway")

_NOT_FORWARDED = frozenset({"host", "content-length", "transfer-encoding"})


def _pseudo(method: str, path: str, scheme: str, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    host = next((v for k, v in headers if k == "host"), "")
    return [(":method", method), (":path", path), (":scheme", scheme), (":authority", host),
            *((k, v) for k, v in headers if k != "host")]


def _plain(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Envoy's request headers as the pipeline reads them (`:authority` is `host`)."""
    out = [(k, v) for k, v in headers if not k.startswith(":")]
    authority = next((v for k, v in headers if k == ":authority"), "")
    return [("host", authority), *out] if authority else out


class ProcessorFront:
    """Serves `Gateway._proxy` when the gateway runs with a payload processor. `gateway` is the `Gateway`."""

    def __init__(self, gateway: Any, target: str) -> None:
        self.gateway = gateway
        self.target = target
        self._channel: Any = None

    @property
    def channel(self) -> Any:
        if self._channel is None:  # created in the serving loop
            self._channel = channel(self.target)
        return self._channel

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def metrics(self) -> bytes:
        """The data plane's metrics: the processor's families (it settles, records and runs the guardrails)
        and this process's other ones; the processor's alone when it cannot be read is not an option (an empty
        family here would hide its samples), so then only this process's."""
        url = self.gateway.settings.payload_processor_metrics_url
        theirs = b""
        if url:
            try:
                response = await self.gateway.callbacks.get(url)
                theirs = response.content if response.status_code == 200 else b""
            except httpx.HTTPError as exc:
                log.warning("payload processor metrics unavailable: %s", type(exc).__name__)
        names = {family.name for family in text_string_to_metric_families(theirs.decode())} if theirs else set()
        return theirs + generate_latest(_Without(self.gateway.metrics, names))

    async def __call__(self, scope: Any, receive: Any, send: Any, read_body: Any) -> None:
        from maasctl.gateway.server import _BodyTooLarge, _refuse, _respond

        gw = self.gateway
        pipeline = gw.pipeline
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string", b"").decode("latin-1")
        method, scheme = scope["method"], scope.get("scheme", "http")
        path = raw_path.decode("latin-1") + (f"?{query}" if query else "")
        ex: Exchange | None = None
        try:
            body = await read_body(receive, gw.settings.max_request_bytes)
        except _BodyTooLarge:  # Envoy's buffer limit answers 413 itself
            await _refuse(send, pipeline.too_large(pipeline.exchange(method, raw_path, query, headers, scheme)))
            return
        except ConnectionResetError:
            return
        try:
            pre = open_filter(self.channel, PRE)
            routed = await pre.request(_pseudo(method, path, scheme, headers), body)
            await pre.aclose()
            if routed.immediate is not None:
                await _answer(send, routed.immediate)
                return
            moved = next((v for k, v in routed.headers if k == ":path"), path)
            if routed.clear_route_cache and moved != path:  # an in-cluster model's own path: route on it
                routed_path, _, routed_query = moved.encode("latin-1").partition(b"?")
                raw_path, query = routed_path, routed_query.decode("latin-1")
            ex = pipeline.exchange(method, raw_path, query, _plain(routed.headers), scheme)
            ex.raw_body = routed.body  # a base-URL path is routed by the body's `model` (`routes_by_body`)
            refusal = await pipeline.request_head(ex, "envoy") or await pipeline.request_body(ex, routed.body, "envoy")
            if refusal is not None:
                await _refuse(send, refusal)
                return
            post = open_filter(self.channel, POST)
            try:
                admitted = await post.request(self._authorized(ex, routed.headers), routed.body)
                if admitted.immediate is not None:
                    await _answer(send, admitted.immediate)
                    return
                await self._forward(send, receive, ex, post, admitted.headers, admitted.body)
            finally:
                await post.aclose()
        except ProcessorFailure as failure:
            log.warning("payload processor failed the request: %s", failure.details)
            await _respond(send, failure.status, error_body(failure.status, "payload processing failed",
                                                              "payload_processor_error"))
        finally:
            if ex is not None:
                pipeline.release(ex)

    def bypasses(self, scope: Any) -> bool:
        """The request's route is one the controller renders Envoy's per-route bypass for
        (`payload_processor_bypass_routes`, maas-api's own API): served without the processor, as in a cluster.
        A base-URL inference path never is (its route is the body's model)."""
        bypass = self.gateway.settings.payload_processor_bypass_routes
        if not bypass:
            return False
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        try:
            path = canonical_path(raw_path.split(b"?", 1)[0])
        except AmbiguousPath:
            return False
        if is_base_inference_path(path):
            return False
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        match = self.gateway.pipeline.plane.state.snapshot().table.match(headers.get("host", ""), path,
                                                                         scope["method"], headers)
        return match is not None and match.rule.route_key in bypass

    def _authorized(self, ex: Exchange, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The request after Kuadrant's wasm: Authorino's success headers (`x-maas-identity` among them, as the
        generated AuthPolicy renders it) replace any of the same name."""
        added = {k.lower(): v for k, v in ex.outcome.headers.items()}
        return [*((k, v) for k, v in headers if k not in added), *added.items()]

    async def _forward(self, send: Any, receive: Any, ex: Exchange, post: FilterStream,
                       headers: list[tuple[str, str]], body: bytes) -> None:
        """The router (the route's path rewrite and hostname), then the answer through the post filter. A client
        that leaves a streamed answer resets the stream, as Envoy does: the processor settles it as cut."""
        from maasctl.gateway.server import disconnected
        assert ex.match is not None and ex.backend is not None
        gw = self.gateway
        rule = ex.match.rule
        out = [(k, v) for k, v in headers if not k.startswith(":") and k not in _NOT_FORWARDED]
        if rule.rewrite_hostname:
            out.append(("host", rule.rewrite_hostname))
        url = ex.backend.base_url + ex.match.upstream_path + (f"?{ex.query}" if ex.query else "")
        timeout = rule.timeout if rule.timeout is not None else gw.settings.upstream_timeout
        try:
            response = await gw.upstream.request(
                ex.method, URL(url, encoded=True), headers=CIMultiDict(out), data=body or None,
                timeout=aiohttp.ClientTimeout(total=timeout or None, connect=gw.settings.connect_timeout),
                allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError) as exc:
            status = 504 if isinstance(exc, TimeoutError) else 503
            code = "upstream_timeout" if status == 504 else "upstream_unavailable"
            log.warning("upstream %s unreachable: %s", url.split("?", 1)[0], type(exc).__name__)
            reply = error_body(status, "upstream request timeout" if status == 504 else "upstream connect error", code)
            head = await post.response_headers(status, [("content-type", "application/json")])  # Envoy's local reply
            await _start(send, head.status, head.headers)
            await send({"type": "http.response.body", "body": await post.response_chunk(reply, True)})
            return
        gone: asyncio.Task[None] | None = None
        try:
            head = await post.response_headers(response.status, [(k.decode("latin-1"), v.decode("latin-1"))
                                                                 for k, v in response.raw_headers])
            if head.immediate is not None:
                await _answer(send, head.immediate)
                return
            if post.buffers_response:  # the processor asked for the whole body first (`mode_override`)
                await self._answer_buffered(send, post, head, response)
                return
            await _start(send, head.status, head.headers)
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                gone = asyncio.get_running_loop().create_task(disconnected(receive))
            try:
                async for chunk in response.content.iter_any():
                    if gone is not None and gone.done():
                        post.abort()  # Envoy resets both sides' streams when the downstream goes away
                        return
                    passed = await post.response_chunk(chunk, False)
                    if passed:
                        await send({"type": "http.response.body", "body": passed, "more_body": True})
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("upstream stream broke: %s", type(exc).__name__)
                post.abort()  # Envoy resets the stream: the processor settles it as cut
                await send({"type": "http.response.body", "body": b""})
                return
            await send({"type": "http.response.body", "body": await post.response_chunk(b"", True)})
        except OSError:
            post.abort()  # the client went away
        finally:
            if gone is not None:
                gone.cancel()
            response.release()


    async def _answer_buffered(self, send: Any, post: FilterStream, head: ResponseHead,
                               response: aiohttp.ClientResponse) -> None:
        """Envoy in BUFFERED response mode: the head waits until the processor answered the whole body, so
        its answer may replace the upstream's (an output guardrail's refusal, with its own status)."""
        from maasctl.gateway.server import _respond

        body = bytearray()
        try:
            async for chunk in response.content.iter_any():
                body.extend(chunk)
                if len(body) > BUFFER_LIMIT:
                    break
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("upstream stream broke: %s", type(exc).__name__)
            post.abort()  # Envoy resets the stream: the processor settles it as cut
            await _respond(send, 503, error_body(503, "upstream connect error or disconnect/reset",
                                                 "upstream_unavailable"))
            return
        passed = await post.response_body(bytes(body))
        if isinstance(passed, Immediate):
            await _answer(send, passed)
            return
        await _start(send, head.status, head.headers)
        await send({"type": "http.response.body", "body": passed})


class _Without:
    """The gateway's registry without some families (the processor's version of them wins)."""

    def __init__(self, registry: Any, names: set[str]) -> None:
        self.registry = registry
        self.names = names

    def collect(self) -> Any:
        return (family for family in self.registry.collect() if family.name not in self.names)


async def _start(send: Any, status: int, headers: Sequence[tuple[str, str]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]})


async def _answer(send: Any, immediate: Immediate) -> None:
    await _start(send, immediate.status, [*immediate.headers, ("content-length", str(len(immediate.body)))])
    with contextlib.suppress(OSError):
        await send({"type": "http.response.body", "body": immediate.body})
