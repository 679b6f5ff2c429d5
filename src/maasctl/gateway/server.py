"""The local data plane as an ASGI app on uvicorn: `Gateway`, `serve(settings)`, `run_gateway(settings)`.

Per request, in the order Envoy + Authorino + Limitador apply them: match a route (404 when none), run the
route's AuthPolicy (401/403 with `X-Ext-Auth-Reason`), check the TokenRateLimitPolicy counters (429 with
`Retry-After` when already over), read the body (413 above `max_request_bytes`), proxy upstream with
streaming passthrough (503 when unreachable, 504 on timeout), then charge `usage.total_tokens` and emit a
usage record once the answer is complete (also when the client went away mid-stream).

Reserved paths (never routed): `/_gateway/healthz`, `/_gateway/readyz` (informers synced) and
`POST /_gateway/simulate` (see `maasctl.gateway.simulate`: loopback clients only by default; a caller sees
its own verdict, an administrator anyone's).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import signal
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvicorn
from multidict import CIMultiDict
from starlette.types import Receive, Scope, Send
from yarl import URL

from maasctl.contract.credentials import canonical_authorization
from maasctl.contract.edge import AmbiguousPath, canonical_path, forbidden_client_header, upstream_headers
from maasctl.contract.guardrails import GuardrailsBinding, binding_from_filters
from maasctl.contract.usage import (
    Decompressor,
    InvalidBody,
    JsonModelRewriter,
    JsonUsageScanner,
    ModelMismatch,
    PreparedBody,
    SseUsageFilter,
    Termination,
    charge_for,
    prepare_body,
    request_bound,
)
from maasctl.eventloop import tune_gc
from maasctl.gateway.auth import AuthOutcome, AuthPolicyRuntime, AuthServiceUnavailable, TokenReviewer
from maasctl.gateway.authpolicy import RequestInfo
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.counters import counter_store
from maasctl.gateway.expressions import PolicyError
from maasctl.gateway.guardrails import GuardCheck, GuardrailsClient, OutputGuard, caller_of
from maasctl.gateway.proxy import response_headers
from maasctl.gateway.ratelimit import AppliedLimit, RateDenial, Reservation, TokenRateLimiter
from maasctl.gateway.record import BOUNDS, fit_text, usage_record
from maasctl.gateway.requestlimit import RequestLimiter, denial_response
from maasctl.gateway.routes import RouteMatch
from maasctl.gateway.simulate import SIMULATE_BODY_LIMIT, SimulateAuthority, SimulateRefused, SimulateRequest, simulate
from maasctl.gateway.spool import UsageSpool
from maasctl.gateway.state import SECRET, UPSTREAM_KEY_SELECTOR, WATCHED, GatewayState
from maasctl.gateway.telemetry import SubscriptionTelemetry
from maasctl.gateway.usage import HttpBatchSink, LogSink, UsageSink
from maasctl.httpguard import HttpGuard, HttpLimits, uvicorn_options
from maasctl.runtime import ApiError, Cache, CacheOptions, Client
from maasctl.runtime.connect import connect

__all__ = ["Gateway", "HttpServer", "run_gateway", "serve", "start_http"]

log = logging.getLogger("maasctl.gateway")
RESERVED = "/_gateway/"


class _BodyTooLarge(Exception):
    pass


def _error_body(status: int, message: str, code: str) -> bytes:
    kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}.get(status, "api_error")
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


async def _respond(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


def _token_review(client: Client) -> Callable[[str, tuple[str, ...]], Awaitable[Mapping[str, Any] | None]]:
    async def review(token: str, audiences: tuple[str, ...]) -> Mapping[str, Any] | None:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        try:
            result = await client.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}, "spec": spec}
            )
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("TokenReview failed: %s", type(exc).__name__)
            raise AuthServiceUnavailable("TokenReview failed") from exc
        status = result.get("status") or {}
        return status if status.get("authenticated") else None

    return review


@dataclass
class _Exchange:
    """Per-request facts for charging and the usage record."""

    request_id: str
    started: float
    match: RouteMatch
    outcome: AuthOutcome
    applied: list[AppliedLimit]
    body: PreparedBody
    reservation: Reservation
    guard: GuardCheck | None = None  # guardrails of this request (gateway/guardrails.py)


class Gateway:
    """The local data plane. Call `start()` (informers), serve `gateway` as ASGI, then `stop()`."""

    def __init__(
        self,
        settings: GatewaySettings,
        client: Client,
        *,
        sink: UsageSink | None = None,
        limiter: TokenRateLimiter | None = None,
        callbacks: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.cache = Cache(client, CacheOptions(label_selectors={SECRET: UPSTREAM_KEY_SELECTOR}))
        self.state = GatewayState(self.cache, settings)
        self.limiter = limiter or TokenRateLimiter(counter_store(settings.redis_url, settings.usage_spool_dir))
        self.requests = RequestLimiter(self.limiter.store)  # RateLimitPolicy counts, same counter store
        self._owned: list[httpx.AsyncClient] = []
        self._upstream: aiohttp.ClientSession | None = None  # created in start(): it needs the running loop
        self.callbacks = callbacks or self._own(httpx.AsyncClient(timeout=settings.callback_timeout))
        reviewer = TokenReviewer(_token_review(client), ttl=settings.token_review_ttl,
                                 negative_ttl=settings.token_review_negative_ttl)
        self.simulate_authority = SimulateAuthority(reviewer, client.create, settings.subscription_namespace)
        self.auth = AuthPolicyRuntime(
            self.callbacks,
            reviewer,
            callback_base=settings.maas_api_url,
            callback_secret=settings.maas_api_token,
            callback_timeout=settings.callback_timeout,
            audiences_from_host=settings.token_review_audiences_from_host,
            token_review_ttl=settings.token_review_ttl,
        )
        if sink is None and settings.usage_url:
            spool = UsageSpool(Path(settings.usage_spool_dir)) if settings.usage_spool_dir else None
            sink = HttpBatchSink(settings.usage_url, self.callbacks, batch_size=settings.usage_batch_size,
                                 token=settings.maas_api_token, flush_interval=settings.usage_flush_seconds,
                                 max_buffer=settings.usage_max_buffer, spool=spool)
        elif sink is None:
            sink = LogSink()
        self.sink = sink
        self.telemetry = SubscriptionTelemetry()  # per-subscription latency and tokens (seed 001 §9.1)
        self.guardrails = GuardrailsClient(self._own(httpx.AsyncClient()), settings.guardrails_url,
                                           settings.guardrails_caller_in_flight)
        self._cache_task: asyncio.Task[None] | None = None

    def _own(self, http: httpx.AsyncClient) -> httpx.AsyncClient:
        self._owned.append(http)
        return http

    @property
    def upstream(self) -> aiohttp.ClientSession:
        """The upstream client (aiohttp: its connection pool costs far less per request than httpx's)."""
        if self._upstream is None:
            verify = self.settings.upstream_verify
            tls: ssl.SSLContext | bool = (
                ssl.create_default_context(cafile=verify) if isinstance(verify, str) else
                ssl.create_default_context() if verify else False
            )
            self._upstream = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.settings.upstream_max_connections, ssl=tls),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )
        return self._upstream

    async def start(self, sync_timeout: float = 60) -> None:
        """Start the informers and wait until they listed once."""
        self._cache_task = asyncio.create_task(self.cache.run(), name="gateway cache")
        if not await self.cache.wait_for_sync(WATCHED, deadline=sync_timeout):
            raise TimeoutError("gateway informers did not sync")
        await self.sink.start()  # records a spool kept from an earlier run go out now

    async def stop(self) -> None:
        if self._cache_task is not None:
            self._cache_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cache_task
        await self.auth.settle()  # decisions refreshed ahead of expiry use the callback client closed below
        await self.sink.aclose()
        await self.limiter.store.aclose()
        if self._upstream is not None:
            await self._upstream.close()
        for http in self._owned:
            await http.aclose()

    # -- ASGI --------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            while message["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path.startswith(RESERVED):
            await self._admin(scope, receive, send)
            return
        await self._proxy(scope, receive, send)

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == "/_gateway/healthz":
            await _respond(send, 200, b'{"status":"ok"}')
        elif path == "/_gateway/readyz":
            synced = all(self.cache.informer(g).has_synced for g in WATCHED)
            await _respond(send, 200 if synced else 503, json.dumps({"synced": synced}).encode())
        elif path == "/_gateway/metrics":  # Prometheus text format (guardrails counters among them)
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            payload = generate_latest()
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
        elif path == "/_gateway/simulate" and scope["method"] == "POST":
            if self.settings.admin_from_loopback_only and not _is_loopback(scope):
                await _respond(send, 403, _error_body(403, "simulate is only served to loopback clients", "forbidden"))
                return
            try:
                request = SimulateRequest.from_bytes(await _read_body(receive, SIMULATE_BODY_LIMIT))
            except (ValueError, _BodyTooLarge, ConnectionResetError) as exc:
                await _respond(send, 400, _error_body(400, f"bad simulate request: {exc}", "invalid_request"))
                return
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"authorization"),
                                 None)
            try:
                await self.simulate_authority.authorize(request, authorization)
            except SimulateRefused as refused:
                await _respond(send, refused.status, _error_body(refused.status, str(refused), refused.code))
                return
            report = await simulate(self, request)
            await _respond(send, 200, json.dumps(report.to_json()).encode())
        else:
            await _respond(send, 404, _error_body(404, "not found", "not_found"))

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        raw_headers: list[tuple[str, str]] = [
            (name, canonical_authorization(value) if name == "authorization" else value)
            for name, value in ((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"])
        ]
        headers: dict[str, str] = {}
        for name, value in raw_headers:
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        forbidden = forbidden_client_header(name for name, _ in raw_headers)
        if forbidden is not None:
            await _respond(send, 400, _error_body(
                400, f"header {forbidden!r} is decided by the gateway and may not be sent", "forbidden_header"))
            return
        query = scope.get("query_string", b"").decode("latin-1")
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        try:
            path = canonical_path(raw_path.split(b"?", 1)[0])
        except AmbiguousPath as exc:
            await _respond(send, 400, _error_body(400, f"ambiguous request path: {exc}", "ambiguous_path"))
            return
        host = headers.get("host", "")
        snap = self.state.snapshot()
        match = snap.table.match(host, path, scope["method"], headers)
        if match is None:
            await _respond(send, 404, _error_body(404, f"no route for {path}", "route_not_found"))
            return
        route = match.rule.route_key
        request = RequestInfo(scope["method"], path + (f"?{query}" if query else ""), host, headers,
                              scope.get("scheme", "http"))
        policy = snap.auth.get(route)
        if isinstance(policy, PolicyError):
            await _respond(send, 500, _error_body(500, "the route's AuthPolicy cannot be enforced", "policy_error"))
            return
        if policy is None:
            if not self.settings.serve_routes_without_auth_policy:
                log.info("denied %s %s: no AuthPolicy covers route %s", scope["method"], path, route)
                await _respond(send, 403, _error_body(403, "no AuthPolicy covers this route", "no_auth_policy"))
                return
            outcome = AuthOutcome(True, reason="no AuthPolicy")
        else:
            outcome = await self.auth.check(policy, request)
        if not outcome.allowed:
            extra = {"x-ext-auth-reason": outcome.message, **outcome.deny_headers}
            if outcome.status == 401:
                extra.setdefault("www-authenticate", 'Bearer realm="maas"')
            code = {401: "unauthenticated", 503: "auth_unavailable"}.get(outcome.status, "forbidden")
            deny = outcome.deny_body.encode() if outcome.deny_body is not None else _error_body(
                outcome.status, outcome.message, code)
            log.info("denied %s %s: %d %s", scope["method"], path, outcome.status, outcome.reason)
            await _respond(send, outcome.status, deny, extra)
            return
        if not self.sink.accepting():  # maas-api has been unreachable long enough to fill the usage buffer
            log.warning("refused %s %s: usage records cannot be kept", scope["method"], path)
            await _respond(send, 503, _error_body(503, "usage metering is unavailable, retry later",
                                                  "metering_unavailable"), {"retry-after": "5"})
            return
        try:
            raw = await _read_body(receive, self.settings.max_request_bytes)
        except _BodyTooLarge:
            await _respond(send, 413, _error_body(413, "request body too large", "body_too_large"))
            return
        except ConnectionResetError:
            return
        try:
            body = prepare_body(raw, match.rule.rename, content_type=headers.get("content-type"))
        except ModelMismatch as exc:
            await _respond(send, 404, _error_body(404, str(exc), "model_not_found"))
            return
        except InvalidBody as exc:
            await _respond(send, 400, _error_body(400, str(exc), "invalid_body"))
            return
        trlp = snap.limits.get(route)
        if isinstance(trlp, PolicyError):
            await _respond(send, 500, _error_body(500, "the route's rate limit cannot be enforced", "policy_error"))
            return
        backend = match.rule.pick_backend()
        if backend is None:
            await _respond(send, 500, _error_body(500, match.rule.backend_error or "no backend", "backend_error"))
            return
        key = None
        if match.rule.upstream_key_secret and policy is not None:  # only after an AuthPolicy allowed it
            key = self.state.upstream_key(
                match.rule.namespace, match.rule.upstream_key_secret, match.rule.upstream_key_field
            )
            if key is None:
                await _respond(send, 503, _error_body(503, "upstream credentials are not available", "no_upstream_key"))
                return
        rlp = snap.requests.get(route)  # RateLimitPolicy (billing Plans): request counts
        if isinstance(rlp, PolicyError):
            await _respond(send, 500, _error_body(500, "the route's request limit cannot be enforced", "policy_error"))
            return
        if rlp is not None:
            refused = await self.requests.admit(rlp, route, {"request": request.attributes(), "auth": outcome.filters})
            if refused is not None:
                await _respond(send, *denial_response(refused))
                return
        applied: list[AppliedLimit] = []
        reservation = Reservation((), 0)
        if trlp is not None:
            activation = {"request": request.attributes(), "auth": outcome.filters}
            applied = self.limiter.applicable(trlp, route, activation)
            bound = request_bound(body, self.settings.completion_ceiling)
            admitted = await self.limiter.reserve(applied, self.limiter.estimate(applied, bound))
            if isinstance(admitted, RateDenial):
                await _respond(send, 429, _error_body(
                    429, f"token limit {admitted.limit} per {admitted.window} exceeded", "rate_limited"),
                    {"retry-after": str(admitted.retry_after)})
                return
            reservation = admitted
        exchange = _Exchange(uuid.uuid4().hex, started, match, outcome, applied, body, reservation)
        # --- guardrails: input rails before forwarding (gateway/guardrails.py) -----------------------------
        binding = binding_from_filters(outcome.filters)
        if binding is not None and not await self._guard_input(send, exchange, binding):
            return
        # --- end guardrails ---------------------------------------------------------------------------------
        rule = match.rule
        out_headers = upstream_headers(raw_headers, outcome.headers, forward_credentials=rule.forward_credentials,
                                       set_headers=rule.set_headers, add_headers=rule.add_headers,
                                       remove_headers=(*rule.remove_headers, "accept-encoding"), upstream_key=key)
        out_headers.append(("accept-encoding", "identity"))  # usage is read from the answer: no compression
        if body.content != raw:
            out_headers = [(n, v) for n, v in out_headers if n != "content-type"]
            out_headers.append(("content-type", "application/json"))
        if match.rule.rewrite_hostname:
            out_headers.append(("host", match.rule.rewrite_hostname))
        url = backend.base_url + match.upstream_path + (f"?{query}" if query else "")
        timeout = match.rule.timeout if match.rule.timeout is not None else self.settings.upstream_timeout
        try:
            await self._forward(send, exchange, scope["method"], url, out_headers, timeout or None)
        finally:
            if exchange.guard is not None:  # guardrails: the caller's engine slot is given back
                exchange.guard.release()

    async def _guard_input(self, send: Send, ex: _Exchange, binding: GuardrailsBinding) -> bool:
        """Input rails; False when the request was answered here (blocked or refused, settled and recorded)."""
        ex.guard, refusal = await self.guardrails.admit(binding, ex.body, ex.match.upstream_path,
                                                        caller_of(ex.outcome.filters))
        if refusal is None:
            return True
        await _respond(send, refusal.status, refusal.body, refusal.headers)
        await self._finish(ex, refusal.status, None, "refused")
        return False

    async def _forward(self, send: Send, ex: _Exchange, method: str, url: str, headers: list[tuple[str, str]],
                       timeout: float | None) -> None:
        if ex.guard is not None:  # guardrails: output rails around the answer (gateway/guardrails.py)
            send = OutputGuard(self.guardrails, ex.guard, send, self.settings.guardrails_stream_chunk_chars)
        client_timeout = aiohttp.ClientTimeout(total=timeout, connect=self.settings.connect_timeout)
        try:
            response = await self.upstream.request(
                method, URL(url, encoded=True), headers=CIMultiDict(headers), data=ex.body.content or None,
                timeout=client_timeout, allow_redirects=False)
        except TimeoutError:
            await _respond(send, 504, _error_body(504, "upstream request timeout", "upstream_timeout"))
            await self._finish(ex, 504, None, "upstream_error")
            return
        except aiohttp.ClientError as exc:
            log.warning("upstream %s unreachable: %s", url.split("?", 1)[0], type(exc).__name__)
            await _respond(send, 503, _error_body(503, "upstream connect error", "upstream_unavailable"))
            await self._finish(ex, 503, None, "upstream_error")
            return
        status = response.status
        sse = "text/event-stream" in response.headers.get("content-type", "")
        decoder = Decompressor(response.headers.get("content-encoding", ""))
        plain = decoder.readable and decoder.identity
        # The stream is edited (the injected usage chunk dropped) only when it is not compressed; otherwise it
        # goes through as sent and a decompressed copy is scanned.
        rename_to = ex.body.response_model if plain else None  # a renamed model's answers name the published one
        filt = SseUsageFilter(drop_usage_chunk=ex.body.injected_usage and plain, rename_to=rename_to) if sse else None
        scanner = None if sse else JsonUsageScanner(self.settings.max_response_scan_bytes)
        json_answer = "json" in response.headers.get("content-type", "")
        rewriter = (JsonModelRewriter(rename_to, self.settings.max_response_scan_bytes)
                    if rename_to is not None and not sse and json_answer else None)
        raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
        termination: Termination = "complete"
        sent_start = False
        try:
            changed = (sse and plain) or rewriter is not None
            await send({"type": "http.response.start", "status": status,
                        "headers": response_headers(raw_headers, body_changed=changed)})
            sent_start = True
            async for chunk in response.content.iter_any():
                if filt is not None and plain:
                    chunk = filt.feed(chunk)
                elif filt is not None:
                    filt.feed(decoder.feed(chunk))
                elif scanner is not None:
                    scanner.feed(decoder.feed(chunk))
                    if rewriter is not None:
                        chunk = rewriter.feed(chunk)
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = filt.close() if filt is not None and plain else rewriter.close() if rewriter is not None else b""
            await send({"type": "http.response.body", "body": tail})
            if filt is not None and not filt.done and filt.usage is None:
                termination = "truncated"
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("upstream stream broke: %s", type(exc).__name__)
            termination = "upstream_error"
            if not sent_start:
                status = 504 if isinstance(exc, TimeoutError) else 502
                await _respond(send, status, _error_body(status, "upstream error", "upstream_error"))
            else:
                termination = "truncated"
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b""})
        except OSError:
            termination = "client_disconnect"  # charged all the same: a conservative estimate if unread
        finally:
            response.release()
            if filt is not None:
                usage = filt.usage
            elif rewriter is not None and rewriter.answer is not None:  # parsed already: not a second time
                usage = rewriter.answer.get("usage")
            else:
                usage = scanner.usage if scanner is not None else None
            if not decoder.readable:
                usage = None
            await self._finish(ex, status, usage, termination)

    async def _finish(self, ex: _Exchange, status: int, usage: Any, termination: Termination) -> None:
        """Charge the counters (the answer's usage, else a conservative estimate), release the request's
        reservation and emit the usage record (always one: `usage_record`; an unrecorded request is unbilled)."""
        charge = charge_for(status, usage, ex.body, termination, completion_ceiling=self.settings.completion_ceiling)
        await self.limiter.settle(ex.reservation, ex.applied, charge.charged)
        guard = ex.guard
        if guard is not None and guard.client_status is not None:  # a guardrail replaced the upstream answer
            status = guard.client_status if guard.client_status != 200 else status
            termination = "refused"
        identity = ex.outcome.filters.get("identity") or {}
        if not isinstance(identity, Mapping):
            identity = {}
        sub_info = (ex.outcome.auth.get("metadata") or {}).get("subscriptionInfo") or {}
        if not isinstance(sub_info, Mapping):
            sub_info = {}
        labels = sub_info.get("labels")
        sub = ""
        if identity.get("selected_subscription"):
            sub = f"{identity.get('selected_subscription_namespace', '')}/{identity['selected_subscription']}"
        record = usage_record({
            "timestamp": time.time(),
            "request_id": ex.request_id,
            "user": str(identity.get("userid", "")),
            "key_id": str(identity.get("keyId", "")),
            "subscription": sub,
            "organization": str(sub_info.get("organizationId") or ""),
            "cost_center": str(sub_info.get("costCenter") or ""),
            "labels": {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
            "model": billed_model(ex.match.rule.model, identity),
            "route": ex.match.rule.route_key,
            "status": status,
            "latency_ms": round((time.monotonic() - ex.started) * 1000, 3),
            "streamed": ex.body.streaming,
            "charged_tokens": charge.charged if ex.applied else 0,
            "estimated": charge.estimated,
            "estimate_reason": charge.estimate_reason,
            "termination": termination,
            "guardrails": guard.outcome if guard is not None else "",
            **charge.numbers,
        })
        self.telemetry.observe(record)
        self.sink.emit(record)
        if guard is not None and guard.prompt_tokens + guard.completion_tokens > 0:
            # guardrails: the guard model's tokens, metered on their own record, never charged to the quota
            guard_record = record.model_copy(update={
                "request_id": f"{ex.request_id}-guard",
                "model": fit_text(f"guardrails/{guard.binding.config}", BOUNDS.strings["model"]),
                "input_tokens": guard.prompt_tokens, "output_tokens": guard.completion_tokens,
                "total_tokens": guard.prompt_tokens + guard.completion_tokens, "cached_tokens": 0,
                "reasoning_tokens": 0, "charged_tokens": 0, "estimated": False, "estimate_reason": "",
                "status": 200, "streamed": False, "termination": "complete"})
            self.sink.emit(guard_record)


def _is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


# --- running ----------------------------------------------------------------------------------------------


@dataclass
class HttpServer:
    """A uvicorn server started in this event loop."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str

    async def stop(self) -> None:
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 15)


async def start_http(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                     limits: HttpLimits | None = None) -> HttpServer:
    """Serve an ASGI app on `host:port` (0: a free port) in the running loop, behind `HttpGuard`; returns its
    base URL."""
    limits = limits or HttpLimits()
    # proxy_headers=False: this is the edge, so the client address and scheme are the connection's; uvicorn's
    # default would take them from a loopback caller's X-Forwarded-For / X-Forwarded-Proto (request.scheme in
    # the policies' CEL, the loopback check of the admin endpoints).
    config = uvicorn.Config(HttpGuard(app, limits), host=host, port=port, log_level=log_level, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=5, server_header=False, proxy_headers=False,
                            **uvicorn_options(limits))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("server did not start")
        await asyncio.sleep(0.01)
    sock = server.servers[0].sockets[0].getsockname()
    return HttpServer(server, task, f"http://{sock[0]}:{sock[1]}")


async def serve(settings: GatewaySettings, stop: asyncio.Event | None = None) -> None:
    """Run the gateway on `settings.host:port` until `stop` is set."""
    stop = stop or asyncio.Event()
    api = await connect(settings.kubeconfig)
    gateway = Gateway(settings, Client(api))
    try:
        await gateway.start()
        tune_gc()  # after the caches' initial lists: those objects live as long as the process
        http = await start_http(gateway, settings.host, settings.port, settings.log_level)
        log.info("gateway %s/%s serving on %s", settings.gateway_namespace, settings.gateway_name, http.url)
        try:
            await stop.wait()
        finally:
            await http.stop()
    finally:
        await gateway.stop()
        await api.close()


async def run_gateway(settings: GatewaySettings, stop: asyncio.Event | None = None) -> int:
    """`maasctl gateway`: serve until SIGINT/SIGTERM (or `stop`); exit code 0."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)
    return 0


def billed_model(route_model: str | None, identity: Mapping[str, Any]) -> str:
    """The MaaSModelRef (`ns/name`) a request is recorded against: the route's model label (routes the
    controller generates), else the model the AuthPolicy that admitted the request was generated for (the part
    after `@` of `selected_subscription_key`; KServe-owned routes carry no label of ours). Never the `model` of
    the request body: that is the caller's claim, and billing by model would let a caller pick its price."""
    if route_model:
        return route_model
    _, at, model = str(identity.get("selected_subscription_key") or "").partition("@")
    return model if at else ""
