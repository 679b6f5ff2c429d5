"""The local data plane as an ASGI app on uvicorn: `Gateway`, `serve(settings)`, `run_gateway(settings)`.

`Gateway` is the HTTP front of the request pipeline (`gateway.pipeline`, docs/data-plane.md): it hands each
request to the pipeline's stages (edge, route, auth, metering, body, limits, reservation, guardrails), reads the
body (413 above `max_request_bytes`), forwards what `upstream_request` says with aiohttp (503 when unreachable,
504 on timeout), streams the answer back through the response pass (usage, rename, output guardrails) and
calls `finish` once the answer is complete (also when the client went away mid-stream), which charges the
counters and emits the usage record. `role` is "all" (every stage in process); the payload-processor mode
runs "envoy".

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvicorn
from multidict import CIMultiDict
from starlette.types import Receive, Scope, Send
from yarl import URL

from maasctl.contract.errors import Refusal, error_body
from maasctl.contract.usage import Termination
from maasctl.dataplane.charge import completion_ceiling
from maasctl.dataplane.failover import Breakers
from maasctl.eventloop import tune_gc
from maasctl.gateway.auth import AuthPolicyRuntime, AuthServiceUnavailable, TokenReviewer
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.counters import counter_store
from maasctl.gateway.guardrails import GuardrailsClient
from maasctl.gateway.pipeline import Exchange, Pipeline, Role, UpstreamRequest
from maasctl.gateway.pool import WORKER_REQUESTS, Worker, metrics_registry, reuse_port_socket
from maasctl.gateway.providers import ChatAnswer, ProviderCaller
from maasctl.gateway.ratelimit import TokenRateLimiter
from maasctl.gateway.requestlimit import RequestLimiter
from maasctl.gateway.simulate import SIMULATE_BODY_LIMIT, SimulateAuthority, SimulateRefused, SimulateRequest, simulate
from maasctl.gateway.spool import UsageSpool
from maasctl.gateway.state import SECRET, UPSTREAM_KEY_SELECTOR, WATCHED, GatewayState
from maasctl.gateway.telemetry import SubscriptionTelemetry
from maasctl.gateway.usage import HttpBatchSink, LogSink, UsageSink
from maasctl.gateway.workers import WorkerPool
from maasctl.httpguard import HttpGuard, HttpLimits, uvicorn_options
from maasctl.runtime import ApiError, Cache, CacheOptions, Client
from maasctl.runtime.connect import connect

__all__ = ["Gateway", "HttpServer", "run_gateway", "serve", "start_http"]

log = logging.getLogger("maasctl.gateway")
RESERVED = "/_gateway/"


class _BodyTooLarge(Exception):
    pass


async def _respond(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, refusal: Refusal) -> None:
    await _respond(send, refusal.status, refusal.body, refusal.headers)


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
        worker: Worker | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.worker = worker  # this process is one worker of a pool (`gateway.workers`)
        self.metrics = metrics_registry(worker.state if worker else None, worker.metrics_dir if worker else None)
        self.taken = WORKER_REQUESTS.labels(str(worker.index) if worker else "0")
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
        self.role: Role = "all"  # every stage in process (the payload-processor mode runs "envoy")
        self.pipeline = Pipeline(self)
        # a model with several providers: the attempts and their circuit breakers (per process)
        self.providers = ProviderCaller(
            lambda: self.upstream, self.state.upstream_key,
            Breakers(settings.provider_breaker_failures, settings.provider_breaker_cooldown),
            connect_timeout=settings.connect_timeout, scan_limit=settings.max_response_scan_bytes)
        self.front: Any = None  # with a payload processor: the ext_proc front (maasctl.payload.front)
        if settings.payload_processor:
            from maasctl.payload.front import ProcessorFront

            self.role, self.front = "envoy", ProcessorFront(self, settings.payload_processor)

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
                connector=aiohttp.TCPConnector(limit=self.settings.upstream_max_connections, ssl=tls,
                                         keepalive_timeout=self.settings.upstream_keepalive_seconds),
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
        if self.front is not None:
            await self.front.aclose()
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
            await self._ready(send)
        elif path == "/_gateway/metrics":  # Prometheus text format (guardrails counters among them)
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            payload = await self.front.metrics() if self.front is not None else generate_latest(self.metrics)
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
        elif path == "/_gateway/simulate" and scope["method"] == "POST":
            if self.settings.admin_from_loopback_only and not _is_loopback(scope):
                await _respond(send, 403, error_body(403, "simulate is only served to loopback clients", "forbidden"))
                return
            try:
                request = SimulateRequest.from_bytes(await _read_body(receive, SIMULATE_BODY_LIMIT))
            except (ValueError, _BodyTooLarge, ConnectionResetError) as exc:
                await _respond(send, 400, error_body(400, f"bad simulate request: {exc}", "invalid_request"))
                return
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"authorization"),
                                 None)
            try:
                await self.simulate_authority.authorize(request, authorization)
            except SimulateRefused as refused:
                await _respond(send, refused.status, error_body(refused.status, str(refused), refused.code))
                return
            report = await simulate(self, request)
            await _respond(send, 200, json.dumps(report.to_json()).encode())
        else:
            await _respond(send, 404, error_body(404, "not found", "not_found"))

    async def _ready(self, send: Send) -> None:
        """Informers synced; in a pool, every worker ready too (a dead or restarting one fails the pool's)."""
        synced = all(self.cache.informer(g).has_synced for g in WATCHED)
        report: dict[str, Any] = {"synced": synced}
        ready = synced
        if self.worker is not None:
            report["workers"] = {"configured": self.worker.state.workers, "ready": self.worker.state.ready_count()}
            ready = ready and self.worker.pool_ready()
        await _respond(send, 200 if ready else 503, json.dumps(report).encode())

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The HTTP front of the pipeline (`gateway.pipeline`): it reads the body, forwards and streams back."""
        self.taken.inc()
        # with a payload processor the payload stages run there, over ext_proc; a route Envoy serves without it
        # (maas-api's: `bypasses`) runs Envoy's stages only, here (role "envoy": nothing metered or recorded)
        if self.front is not None and not self.front.bypasses(scope):
            await self.front(scope, receive, send, _read_body)
            return
        role = self.role
        pipeline = self.pipeline
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        ex = pipeline.exchange(scope["method"], raw_path, scope.get("query_string", b"").decode("latin-1"), headers,
                               scope.get("scheme", "http"))
        early: bytes | None = None
        if pipeline.routes_by_body(ex):  # one base URL: the body names the model the route is matched by
            try:
                early = ex.raw_body = await _read_body(receive, self.settings.max_request_bytes)
            except _BodyTooLarge:
                await _refuse(send, pipeline.too_large(ex))
                return
            except ConnectionResetError:
                return
        refusal = await pipeline.request_head(ex, role)
        if refusal is None:
            try:
                raw = early if early is not None else await _read_body(receive, self.settings.max_request_bytes)
            except _BodyTooLarge:
                refusal = pipeline.too_large(ex)
            except ConnectionResetError:
                return
            else:
                refusal = await pipeline.request_body(ex, raw, role)
                if refusal is not None:
                    await _refuse(send, refusal)
                    await pipeline.finish(ex, refusal.status, "refused")
                    return
        if refusal is not None:
            await _refuse(send, refusal)
            return
        try:
            await self._forward(send, ex, receive)
        finally:
            pipeline.release(ex)

    async def _forward(self, send: Send, ex: Exchange, receive: Receive) -> None:
        """Forward, stream the answer back and settle. A client that leaves a streamed answer is noticed by ASGI's
        `http.disconnect` (uvicorn's `send` returns silently after it): the answer stops at the next chunk and the
        exchange settles `client_disconnect` with what was read, never `complete` with what the client never got.
        A model with several providers goes to them in turn (`gateway.providers`), its answer read as Chat."""
        pipeline = self.pipeline
        up = pipeline.upstream_request(ex)
        answer = await (self._providers(ex, up) if ex.match is not None and ex.match.rule.providers is not None
                        else self._upstream_call(ex, up))
        if isinstance(answer, Refusal):
            await _refuse(send, pipeline.shaped(ex, answer))
            await pipeline.finish(ex, answer.status, "upstream_error" if answer.status >= 500 else "refused")
            return
        status = answer.status
        resp = pipeline.response(ex, status, answer.headers)
        termination: Termination = "complete"
        head_sent = False

        async def head() -> None:
            nonlocal head_sent
            if not head_sent and not resp.held:
                head_sent = True
                await send({"type": "http.response.start", "status": resp.status, "headers": [
                    (k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers]})

        # a streamed answer is cut when the client leaves (it saves the provider's tokens); a JSON answer is
        # generated whole anyway, and watching for it would cost every request a task
        streamed = any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in answer.headers)
        gone = asyncio.get_running_loop().create_task(disconnected(receive)) if streamed else None
        try:
            await head()
            async for chunk in answer.chunks():
                if gone is not None and gone.done():
                    raise _ClientGone
                chunk = await resp.feed(chunk)
                await head()
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = await resp.close()
            await head()
            await send({"type": "http.response.body", "body": tail})
            termination = resp.termination
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("upstream stream broke: %s", type(exc).__name__)
            termination = "truncated"
            with contextlib.suppress(Exception):
                tail = await resp.abort()
                await head()
                await send({"type": "http.response.body", "body": tail})
        except OSError:
            termination = "client_disconnect"  # charged all the same: a conservative estimate if unread
        finally:
            if gone is not None:
                gone.cancel()
            answer.release()
            await pipeline.finish(ex, status, termination)

    async def _upstream_call(self, ex: Exchange, up: UpstreamRequest) -> _Upstream | Refusal:
        """The one upstream request of a route with one backend: its answer's head, or the refusal."""
        client_timeout = aiohttp.ClientTimeout(total=up.timeout, connect=self.settings.connect_timeout)
        try:
            response = await self.upstream.request(
                ex.method, URL(up.base_url + up.path_and_query, encoded=True), headers=CIMultiDict(up.headers),
                data=up.body or None, timeout=client_timeout, allow_redirects=False)
        except TimeoutError:
            return Refusal(504, "upstream_timeout", "upstream request timeout")
        except aiohttp.ClientError as exc:
            log.warning("upstream %s unreachable: %s", up.base_url + up.path_and_query.split("?", 1)[0],
                        type(exc).__name__)
            return Refusal(503, "upstream_unavailable", "upstream connect error")
        return _Upstream(response)

    async def _providers(self, ex: Exchange, up: UpstreamRequest) -> ChatAnswer | Refusal:
        """A model with several providers: the attempts, in process (the cluster's relay does the same)."""
        assert ex.match is not None
        rule = ex.match.rule
        assert rule.providers is not None
        answer, refusal, provider = await self.providers.call(
            rule.route_key, rule.namespace, rule.providers, up.body, up.headers,
            ceiling=completion_ceiling(rule.completion_ceiling, self.settings.completion_ceiling), timeout=up.timeout)
        ex.provider = provider.name if provider is not None else ""
        if answer is None:
            assert refusal is not None
            return refusal
        return answer


class _Upstream:
    """A single upstream's answer, read as `_forward` reads a provider relay's `ChatAnswer`."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.status = response.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]

    def chunks(self) -> AsyncIterator[bytes]:
        return self.response.content.iter_any()

    def release(self) -> None:
        self.response.release()


class _ClientGone(OSError):
    """The client closed the connection while its answer was streaming."""


async def disconnected(receive: Receive) -> None:
    """Returns once the client has gone (the request body was read before: only `http.disconnect` comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


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
                     limits: HttpLimits | None = None, *, reuse_port: bool = False) -> HttpServer:
    """Serve an ASGI app on `host:port` (0: a free port) in the running loop, behind `HttpGuard`; returns its
    base URL. `reuse_port`: on a socket bound with SO_REUSEPORT, as every worker of a pool binds its ports."""
    limits = limits or HttpLimits()
    # proxy_headers=False: this is the edge, so the client address and scheme are the connection's; uvicorn's
    # default would take them from a loopback caller's X-Forwarded-For / X-Forwarded-Proto (request.scheme in
    # the policies' CEL, the loopback check of the admin endpoints).
    config = uvicorn.Config(HttpGuard(app, limits), host=host, port=port, log_level=log_level, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=5, server_header=False, proxy_headers=False,
                            **uvicorn_options(limits))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve([reuse_port_socket(host, port)] if reuse_port else None))
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("server did not start")
        await asyncio.sleep(0.01)
    sock = server.servers[0].sockets[0].getsockname()
    return HttpServer(server, task, f"http://{sock[0]}:{sock[1]}")


async def serve(settings: GatewaySettings, stop: asyncio.Event | None = None, worker: Worker | None = None) -> None:
    """Run the gateway on `settings.host:port` until `stop` is set (as `worker` of a pool: on its shared port)."""
    stop = stop or asyncio.Event()
    api = await connect(settings.kubeconfig)
    gateway = Gateway(settings, Client(api), worker=worker)
    try:
        await gateway.start()
        tune_gc()  # after the caches' initial lists: those objects live as long as the process
        http = await start_http(gateway, settings.host, settings.port, settings.log_level, reuse_port=bool(worker))
        log.info("gateway %s/%s serving on %s%s", settings.gateway_namespace, settings.gateway_name, http.url,
                 f" (worker {worker.index})" if worker else "")
        if worker is not None:
            worker.set_ready(True)
        try:
            await stop.wait()
        finally:
            if worker is not None:
                worker.set_ready(False)  # draining: the pool is not ready any more
            await http.stop()
    finally:
        await gateway.stop()
        await api.close()


async def run_gateway(settings: GatewaySettings, stop: asyncio.Event | None = None, worker: Worker | None = None
                      ) -> int:
    """`maasctl gateway`: serve until SIGINT/SIGTERM (or `stop`); exit code 0. With `settings.workers` > 1 this
    process is the parent of that many workers (`gateway.workers`), each running this function as `worker`."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if settings.workers > 1 and worker is None:
        pool = WorkerPool(settings, _gateway_worker)
        bound = pool.start()
        log.info("gateway %s/%s: %d worker processes on %s:%d", settings.gateway_namespace, settings.gateway_name,
                 settings.workers, bound.host, bound.port)
        return await pool.run(stop)
    await serve(settings, stop, worker)
    return 0


async def _gateway_worker(settings: GatewaySettings, worker: Worker) -> int:
    """A worker of the gateway's pool (spawned by `WorkerPool`)."""
    return await run_gateway(settings, worker=worker)
