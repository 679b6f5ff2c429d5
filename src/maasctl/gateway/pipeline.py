"""The data plane's request path: one `Exchange` per request through ordered stages, for every front.

The stages, in the order of the Envoy filter chain they stand for (docs/data-plane.md), each tagged with who
runs it in a cluster (`envoy`: Envoy + Authorino + Limitador; `processor`: the payload processor):

    edge              processor  forbidden client headers (x-maas-*, ...), canonical path        400
    route             envoy      the HTTPRoute rule for host + path (+ headers)                  404
    auth              envoy      the route's AuthPolicy; no policy is 403 unless allowed         401/403/500/503
    model listing     processor  `GET <model path>/v1/models` the data plane answers itself      200
                                 (a Messages provider, several providers: `RouteRule.listing`)
    metering          processor  usage records can be kept (the sink accepts)                    503
    body              processor  body size, read and prepared (stream usage, rename, ceiling)    413/400/404
    limits valid      envoy      the route's TokenRateLimitPolicy compiles                        500
    backend           envoy      the rule's backend                                              500
    provider key      processor  the ExternalModel's upstream key is available                   503
    request limits    envoy      RateLimitPolicy (billing Plans): one hit per request            429
    token reservation processor  TokenRateLimitPolicy: reserve the request's bound (the TRLP     429
                                 *check* is Limitador's in a cluster)
    input guardrails  processor  the input rails                                                 400/413/429/503
    upstream          processor  provider key, model rename, stream usage (`upstream_request`)
    -- forward (the front) --
    output guardrails processor  usage scan, usage chunk drop, rename, output rails (`response`)
    settle and record processor  charge the counters, release the reservation, one usage record (`finish`)

The push-style API the fronts use (the HTTP gateway in server.py, the payload processor, simulate):

    ex = pipeline.exchange(method, raw_path, query, headers, scheme)   # names lowercased
    refusal = await pipeline.request_head(ex, role)       # edge .. metering; role "all" | "envoy" | "processor"
    refusal = await pipeline.request_body(ex, raw, role)  # body .. input guardrails
    upstream = pipeline.upstream_request(ex)              # UpstreamRequest(path_and_query, headers, body, ...)
    resp = pipeline.response(ex, status, headers)         # ResponsePass: .status/.headers, .held
    chunk = await resp.feed(chunk); tail = await resp.close()
    await pipeline.finish(ex, status, termination)

Roles: a stage runs in "all" and in its own role; route, limits valid and token reservation are `shared` (the
processor matches the route itself; in role "envoy" token reservation is Limitador's check only, nothing
reserved). Only "all" and "processor" settle and record. Between the roles the identity travels in
`x-maas-identity` (`contract.identity`): a success header of the generated AuthPolicy (Authorino's on the
envoy side), `pipeline.adopt_identity(ex, value)` on the processor's post stream before `request_head`
(it also drops the header); a processor exchange without it is refused 403 `identity_missing`.

Differences from DESIGN_33.md, all additions: `exchange(..., dry=True)` runs the stages as simulate does
(counters read, nothing reserved, counted or sent to the guardrails engine; a guarded request is refused only
where the verdict does not depend on the engine: unreadable or too long input, a configuration that is not
ready); `pipeline.release(ex)` gives the guardrails slot back on paths that may miss `finish`;
`UpstreamRequest` also carries `base_url` and `timeout`; `ResponsePass.held` is True while output guardrails
hold the answer (send the head only once it is False: the rails may replace status and headers),
`resp.abort()` ends a stream that broke; `pipeline.too_large(ex)` is the 413 a front that reads the body
itself answers. `finish` records only an exchange that got past token reservation (what the gateway has always
recorded: a refusal before that reaches neither upstream nor counters) and releases the guardrails slot in any
case. Base-URL routing (the body's `model` into `x-gateway-model-name`, `dataplane.routing`) is in the route
stage, so on those paths the body is needed before `request_head`: `pipeline.routes_by_body(ex)` says so, and
the front sets `ex.raw_body` first.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, Protocol

from maasctl.contract import identity as ids
from maasctl.contract.credentials import canonical_authorization
from maasctl.contract.edge import (
    ANTHROPIC_VERSION,
    AmbiguousPath,
    canonical_path,
    forbidden_client_header,
    upstream_headers,
)
from maasctl.contract.errors import Refusal, error_body
from maasctl.contract.guardrails import GuardrailsBinding, binding_from_filters
from maasctl.contract.labels import API_FORMATS
from maasctl.contract.limits import describe_limit
from maasctl.contract.providers import PROVIDER_HEADER, RELAY_ROUTE_HEADER, RELAY_TOKEN_HEADER
from maasctl.contract.routing import MODEL_HEADER, in_cluster_path
from maasctl.contract.usage import Termination
from maasctl.dataplane.body import InvalidBody, ModelMismatch, PreparedBody, bound_completion, prepare_body
from maasctl.dataplane.charge import charge_for, completion_ceiling, request_bound
from maasctl.dataplane.decompress import Decompressor
from maasctl.dataplane.jsonscan import JsonModelRewriter, JsonUsageScanner
from maasctl.dataplane.routing import NoModel, is_base_inference_path, match_headers
from maasctl.dataplane.sse import SseUsageFilter
from maasctl.dataplane.translate import TranslationError
from maasctl.gateway.auth import AuthOutcome, AuthPolicyRuntime
from maasctl.gateway.authpolicy import CompiledAuthPolicy, RequestInfo
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.expressions import PolicyError
from maasctl.gateway.formats import (
    AnswerTranslator,
    DoorTranslator,
    door_refusal,
    door_request,
    is_door,
    translate_request,
)
from maasctl.gateway.guardrails import (
    GuardCheck,
    GuardrailsClient,
    OutputGuard,
    caller_of,
    readable_input,
    unavailable_config,
)
from maasctl.gateway.providers import relay_token
from maasctl.gateway.proxy import response_header_pairs
from maasctl.gateway.ratelimit import (
    AppliedLimit,
    CompiledTokenRateLimitPolicy,
    RateDenial,
    Reservation,
    TokenRateLimiter,
)
from maasctl.gateway.record import BOUNDS, fit_text, usage_record
from maasctl.gateway.requestlimit import RequestLimiter, denial_response
from maasctl.gateway.routes import Backend, RouteMatch
from maasctl.gateway.state import GatewayState, Snapshot
from maasctl.gateway.telemetry import SubscriptionTelemetry
from maasctl.gateway.usage import UsageSink

__all__ = [
    "NO_RESERVATION",
    "STAGES",
    "Exchange",
    "Pipeline",
    "Plane",
    "ResponsePass",
    "Role",
    "Runner",
    "Stage",
    "UpstreamRequest",
    "billed_model",
]

log = logging.getLogger("maasctl.gateway")

Role = Literal["all", "envoy", "processor"]
Runner = Literal["envoy", "processor"]
NO_RESERVATION: Final = Reservation((), 0)
NO_BODY: Final = PreparedBody(b"")  # frozen: one shared default, not one per exchange


class Plane(Protocol):
    """What the stages use, held by the front (`server.Gateway` is one; the processor has its own). Read on every
    request, so a front may replace a part (a test swaps the sink)."""

    settings: GatewaySettings
    state: GatewayState
    auth: AuthPolicyRuntime
    sink: UsageSink
    limiter: TokenRateLimiter
    requests: RequestLimiter
    guardrails: GuardrailsClient
    telemetry: SubscriptionTelemetry


def _request_id() -> str:
    """A request's id, the usage record's idempotency key: unique without a random draw per request (this
    process's random 64-bit prefix, then a counter), in the 32 hex digits ids have always had."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


_ID_PREFIX: Final = secrets.token_hex(8)
_ID_COUNTER: Final = itertools.count()
NOT_CHECKED: Final = AuthOutcome(True, reason="not checked")  # shared: an outcome is replaced, never edited


@dataclass(slots=True)
class Exchange:
    """One request as it goes through the stages: what it asked, and what each stage decided."""

    method: str
    raw_path: bytes
    query: str
    raw_headers: list[tuple[str, str]]  # as sent, names lowercased, Authorization canonical
    headers: dict[str, str]  # repeated names joined with ","
    scheme: str
    dry: bool = False
    role: Role = "all"  # set by request_head / request_body
    authorized: bool = False  # an AuthPolicy admitted it (here, or Authorino: `adopt_identity`)
    identity_override: Mapping[str, Any] | None = None  # simulate's user and groups: authentication skipped
    request_id: str = field(default_factory=_request_id)
    started: float = field(default_factory=time.monotonic)
    path: str | None = None  # canonical; None when ambiguous
    path_error: str = ""
    snap: Snapshot | None = None
    match: RouteMatch | None = None
    request: RequestInfo | None = None
    policy: CompiledAuthPolicy | None = None
    outcome: AuthOutcome = field(default_factory=lambda: NOT_CHECKED)
    raw_body: bytes = b""
    body: PreparedBody = NO_BODY
    trlp: CompiledTokenRateLimitPolicy | None = None
    backend: Backend | None = None
    translated: bool = False  # the body went to a `messages` provider as Messages: its answer comes back as Chat
    door: bool = False  # at the Messages door (`/v1/messages`): refusals in Anthropic's shape
    door_translated: bool = False  # the door's request was read as Chat: the answer goes back as Messages
    rerouted: bool = False  # a base-URL request sent to its in-cluster model's own path (`route_by_model`)
    provider: str = ""  # a model with several providers: the one that served (or whose failure is the answer)
    upstream_key: str | None = None
    applied: Sequence[AppliedLimit] = ()
    reservation: Reservation = NO_RESERVATION
    admitted: bool = False  # past token reservation: finish records it
    guard: GuardCheck | None = None
    binding: GuardrailsBinding | None = None
    response: ResponsePass | None = None
    denial: RateDenial | None = None  # the limit that refused it (simulate's report)

    @property
    def route(self) -> str:
        return self.match.rule.route_key if self.match is not None else ""

    def activation(self) -> dict[str, Any]:
        """What limit expressions read (`request.*`, `auth.*`)."""
        assert self.request is not None
        return {"request": self.request.attributes(), "auth": self.outcome.filters}


StageFn = Callable[["Pipeline", Exchange], Awaitable[Refusal | None]]


@dataclass(frozen=True)
class Stage:
    """`runner` runs it in a cluster; a `shared` stage also runs in the other role, which needs what it finds
    (the processor matches the route itself, for the rule's model, rename, key and limits)."""

    name: str
    runner: Runner
    run: StageFn
    shared: bool = False


@dataclass(frozen=True)
class UpstreamRequest:
    """What to send upstream: `base_url + path_and_query`, these headers, this body."""

    path_and_query: str
    headers: list[tuple[str, str]]
    body: bytes
    base_url: str
    timeout: float | None


def _ceiling(p: Pipeline, ex: Exchange) -> int:
    """The completion bound of a request that states none: its model's `maxCompletionTokens`, else the
    gateway's default (`dataplane.charge.completion_ceiling`)."""
    model = ex.match.rule.completion_ceiling if ex.match is not None else None
    return completion_ceiling(model, p.plane.settings.completion_ceiling)


def _refuse(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> Refusal:
    return Refusal(status, code, message, headers or {})


# --- the stages ------------------------------------------------------------------------------------------


async def _edge(p: Pipeline, ex: Exchange) -> Refusal | None:
    forbidden = forbidden_client_header(name for name, _ in ex.raw_headers)
    if forbidden is not None:
        return _refuse(403, "forbidden_header", f"header {forbidden!r} is decided by the gateway and may not be sent")
    if ex.path is None:
        return _refuse(400, "ambiguous_path", f"ambiguous request path: {ex.path_error}")
    return None


def route_by_model(ex: Exchange, snap: Snapshot) -> Refusal | None:
    """One base URL (dataplane.routing): on /v1/chat/completions & co. the body's `model` goes into
    `x-gateway-model-name` of `ex.headers` before matching (a front reads the body first there: `routes_by_body`;
    the processor's pre filter does it for Envoy); elsewhere the headers stay as they are (no copy).

    A name no generated rule matches but an in-cluster model's AuthPolicy publishes (`snap.in_cluster`) sends
    the request to that model's own path instead (`contract.routing.in_cluster_path`; `ex.path` and
    `ex.rerouted` say so, the header is dropped): its route's policies then admit and count it, as when the
    client calls that path - the rewritten path must match exactly that route, or the request finds none."""
    try:
        if ex.path is not None and is_base_inference_path(ex.path):
            ex.headers = dict(match_headers(ex.path, ex.headers, ex.raw_body))
    except NoModel as exc:
        return _refuse(400, "model_required", str(exc))
    except InvalidBody as exc:
        return _refuse(400, "invalid_body", str(exc))
    model = snap.in_cluster.get(ex.headers.get(MODEL_HEADER, "")) if snap.in_cluster and ex.path else None
    if model is None:
        return None
    host = ex.headers.get("host", "")
    path = in_cluster_path(model.prefix, ex.path or "")
    if path is None or snap.table.match(host, ex.path or "", ex.method, ex.headers) is not None:
        return None  # the door, or a generated (ExternalModel) rule publishes the name: it wins
    headers = {k: v for k, v in ex.headers.items() if k != MODEL_HEADER}
    found = snap.table.match(host, path, ex.method, headers)
    if found is not None and found.rule.route_key == model.route:
        ex.path, ex.headers, ex.rerouted = path, headers, True
    return None


async def _route(p: Pipeline, ex: Exchange) -> Refusal | None:
    if ex.path is None:  # Envoy normalises paths and rejects what it cannot (the edge stage says why)
        return _refuse(400, "ambiguous_path", f"ambiguous request path: {ex.path_error}")
    ex.snap = snap = p.plane.state.snapshot()
    host = ex.headers.get("host", "")
    # Behind Envoy (roles envoy and processor) the processor's pre filter set the header from the body and refused
    # a client's; the post filter matches at request-head time, before its body (the body stage still refuses a
    # body naming another model: ModelMismatch).
    if not (ex.role in ("envoy", "processor") and MODEL_HEADER in ex.headers):
        refusal = route_by_model(ex, snap)
        if refusal is not None:
            return refusal
    ex.match = snap.table.match(host, ex.path, ex.method, ex.headers)
    if ex.match is None:
        return _refuse(404, "route_not_found", f"no route for {ex.path}")
    ex.request = RequestInfo(ex.method, ex.path + (f"?{ex.query}" if ex.query else ""), host, ex.headers, ex.scheme)
    return None


async def _auth(p: Pipeline, ex: Exchange) -> Refusal | None:
    assert ex.snap is not None and ex.request is not None
    policy = ex.snap.auth.get(ex.route)
    if isinstance(policy, PolicyError):
        return _refuse(500, "policy_error", "the route's AuthPolicy cannot be enforced")
    if policy is None:
        if not p.plane.settings.serve_routes_without_auth_policy:
            log.info("denied %s %s: no AuthPolicy covers route %s", ex.method, ex.path, ex.route)
            return _refuse(403, "no_auth_policy", "no AuthPolicy covers this route")
        ex.outcome = AuthOutcome(True, reason="no AuthPolicy")
        return None
    ex.policy = policy
    ex.outcome = outcome = await p.plane.auth.check(policy, ex.request, identity_override=ex.identity_override)
    if outcome.allowed:
        ex.authorized = True
        return None
    extra = {"x-ext-auth-reason": outcome.message, **outcome.deny_headers}
    if outcome.status == 401:
        extra.setdefault("www-authenticate", 'Bearer realm="maas"')
    code = {401: "unauthenticated", 503: "auth_unavailable"}.get(outcome.status, "forbidden")
    log.info("denied %s %s: %d %s", ex.method, ex.path, outcome.status, outcome.reason)
    raw = outcome.deny_body.encode() if outcome.deny_body is not None else None
    return Refusal(outcome.status, code, outcome.message, extra, raw_body=raw)


async def _model_listing(p: Pipeline, ex: Exchange) -> Refusal | None:
    """`GET <model path>/v1/models` on the route of a model whose provider cannot answer OpenAI's listing (a
    Messages provider, several providers: `RouteRule.listing`, `dataplane.listing`) is answered here, once the
    route's AuthPolicy admitted the caller (Authorino's identity behind Envoy), so maas-api's probe lists the
    model exactly for the callers who may use it. Nothing is sent to a provider, reserved or recorded: an
    answer of the data plane, like a refusal (hence a `Refusal` with status 200), before metering. Without an
    admission (the processor's exchange without Authorino's identity) it does not answer: the request goes on
    and is refused as any other."""
    rule = ex.match.rule if ex.match is not None else None
    if rule is None or rule.listing is None:  # a listing rule matches GET only (gateway.routes)
        return None
    if not ex.authorized and not (ex.policy is None and p.plane.settings.serve_routes_without_auth_policy):
        return None
    return Refusal(200, "model_listing", "the model this route serves", {"cache-control": "no-store"},
                   raw_body=rule.listing)


async def _metering(p: Pipeline, ex: Exchange) -> Refusal | None:
    if p.plane.sink.accepting():
        return None
    log.warning("refused %s %s: usage records cannot be kept", ex.method, ex.path)  # maas-api down too long
    return _refuse(503, "metering_unavailable", "usage metering is unavailable, retry later", {"retry-after": "5"})


async def _body(p: Pipeline, ex: Exchange) -> Refusal | None:
    if len(ex.raw_body) > p.plane.settings.max_request_bytes:
        return p.too_large(ex)
    assert ex.match is not None
    try:
        raw = ex.raw_body
        if ex.door and ex.match.rule.rename is not None:  # an ExternalModel: the door's Messages read as Chat
            raw = door_request(raw)
            ex.door_translated = True
        ex.body = prepare_body(raw, ex.match.rule.rename, content_type=ex.headers.get("content-type"))
        ex.body = bound_completion(ex.body, ex.match.rule.completion_ceiling, ex.match.upstream_path)
        if ex.match.rule.providers is not None and ex.match.rule.rename is not None:
            # several providers, each its own model name: every answer is given the published one
            ex.body = replace(ex.body, response_model=ex.match.rule.rename.published)
        api_format = ex.match.rule.api_format
        if api_format not in API_FORMATS:
            return _refuse(500, "backend_error", "the route names an API format this gateway does not speak")
        if api_format == "messages":
            ex.body = translate_request(ex.body, ex.path or "", _ceiling(p, ex))
            ex.translated = True
    except ModelMismatch as exc:
        return _refuse(404, "model_not_found", str(exc))
    except TranslationError as exc:
        return exc.refusal()
    except InvalidBody as exc:
        return _refuse(400, "invalid_body", str(exc))
    return None


async def _limits_valid(p: Pipeline, ex: Exchange) -> Refusal | None:
    assert ex.snap is not None
    trlp = ex.snap.limits.get(ex.route)
    if isinstance(trlp, PolicyError):
        return _refuse(500, "policy_error", "the route's rate limit cannot be enforced")
    ex.trlp = trlp
    return None


async def _backend(p: Pipeline, ex: Exchange) -> Refusal | None:
    assert ex.match is not None
    ex.backend = ex.match.rule.pick_backend()
    if ex.backend is None:
        return _refuse(500, "backend_error", ex.match.rule.backend_error or "no backend")
    return None


async def _provider_key(p: Pipeline, ex: Exchange) -> Refusal | None:
    rule = ex.match.rule if ex.match is not None else None
    if rule is None or not rule.upstream_key_secret or not ex.authorized:  # only after an AuthPolicy allowed it
        return None
    ex.upstream_key = p.plane.state.upstream_key(rule.namespace, rule.upstream_key_secret, rule.upstream_key_field)
    if ex.upstream_key is None:
        return _refuse(503, "no_upstream_key", "upstream credentials are not available")
    return None


async def _request_limits(p: Pipeline, ex: Exchange) -> Refusal | None:
    assert ex.snap is not None
    rlp = ex.snap.requests.get(ex.route)  # RateLimitPolicy (billing Plans): request counts
    if isinstance(rlp, PolicyError):
        return _refuse(500, "policy_error", "the route's request limit cannot be enforced")
    if rlp is None:
        return None
    requests = p.plane.requests
    check = requests.check if ex.dry else requests.admit
    denied = await check(rlp, ex.route, ex.activation())
    if denied is None:
        return None
    ex.denial = denied
    return denial_response(denied)


async def _token_reservation(p: Pipeline, ex: Exchange) -> Refusal | None:
    if ex.trlp is not None:
        limiter = p.plane.limiter
        ex.applied = limiter.applicable(ex.trlp, ex.route, ex.activation())
        if ex.dry or ex.role == "envoy":  # Limitador's check; the processor reserves on the same counters
            admitted: Reservation | RateDenial = await limiter.check(ex.applied) or NO_RESERVATION
        else:
            bound = request_bound(ex.body, _ceiling(p, ex))
            admitted = await limiter.reserve(ex.applied, limiter.estimate(ex.applied, bound))
        if isinstance(admitted, RateDenial):
            ex.denial = admitted
            return _refuse(429, "rate_limited", f"token limit {admitted.limit} per {admitted.window} exceeded: "
                           f"{describe_limit(admitted.limit_name)}", {"retry-after": str(admitted.retry_after)})
        ex.reservation = admitted
    ex.admitted = True
    return None


async def _input_guardrails(p: Pipeline, ex: Exchange) -> Refusal | None:
    ex.binding = binding = binding_from_filters(ex.outcome.filters)
    if binding is None:
        return None
    assert ex.match is not None
    if ex.dry:  # the engine is not called: refused where the verdict does not depend on it
        _, unfit = readable_input(ex.body, ex.match.upstream_path)
        return unfit or (None if binding.ready else unavailable_config(binding))
    ex.guard, refusal = await p.plane.guardrails.admit(binding, ex.body, ex.match.upstream_path,
                                                       caller_of(ex.outcome.filters))
    return refusal


HEAD_STAGES: Final = (
    Stage("edge", "processor", _edge),
    Stage("route", "envoy", _route, shared=True),
    Stage("auth", "envoy", _auth),
    Stage("model listing", "processor", _model_listing),
    Stage("metering", "processor", _metering),
)
BODY_STAGES: Final = (
    Stage("body", "processor", _body),
    Stage("limits valid", "envoy", _limits_valid, shared=True),
    Stage("backend", "envoy", _backend),
    Stage("provider key", "processor", _provider_key),
    Stage("request limits", "envoy", _request_limits),
    Stage("token reservation", "processor", _token_reservation, shared=True),  # envoy: the TRLP check
    Stage("input guardrails", "processor", _input_guardrails),
)
STAGES: Final = HEAD_STAGES + BODY_STAGES
"""Every request stage, in order (the response stages are `ResponsePass` and `Pipeline.finish`)."""


def _runs(stage: Stage, role: Role) -> bool:
    return role == "all" or stage.shared or stage.runner == role


def _by_role(stages: tuple[Stage, ...]) -> dict[Role, tuple[Stage, ...]]:
    """The stages each role runs, chosen once here rather than on every request."""
    roles: tuple[Role, ...] = ("all", "envoy", "processor")
    return {role: tuple(stage for stage in stages if _runs(stage, role)) for role in roles}


HEAD_BY_ROLE: Final = _by_role(HEAD_STAGES)
BODY_BY_ROLE: Final = _by_role(BODY_STAGES)


# --- the response ----------------------------------------------------------------------------------------


class _Collect:
    """The ASGI `send` an OutputGuard writes to: the head it lets out and the bytes it releases."""

    def __init__(self) -> None:
        self.start: MutableMapping[str, Any] | None = None
        self.parts: list[bytes] = []

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message.get("body"):
            self.parts.append(message["body"])

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _provider_of(ex: Exchange, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The provider relay names the provider that served (`contract.providers.PROVIDER_HEADER`): into the
    exchange when the route has several providers and the name is one of them; never to the client."""
    plan = ex.match.rule.providers if ex.match is not None else None
    kept = []
    for name, value in headers:
        if name.lower() != PROVIDER_HEADER:
            kept.append((name, value))
        elif plan is not None and plan.named(value) is not None:
            ex.provider = value
    return kept


class ResponsePass:
    """The answer on its way back: usage scan, the injected usage chunk dropped, a renamed model's name put
    back, output guardrails. `status`/`headers` are what the client gets (final once `held` is False)."""

    def __init__(self, pipeline: Pipeline, ex: Exchange, status: int, headers: list[tuple[str, str]]) -> None:
        settings = pipeline.plane.settings
        self.ex = ex
        headers = _provider_of(ex, headers)
        # a `messages` provider's answer becomes Chat first (gateway.formats); the stages below read the Chat
        self.translator = AnswerTranslator(
            status, headers, limit=settings.max_response_scan_bytes, created=int(time.time()),
            model=ex.body.response_model, include_usage=not ex.body.injected_usage) if ex.translated else None
        translated_stream = self.translator is not None and self.translator.streaming
        if self.translator is not None:
            status, headers = self.translator.status, self.translator.headers
        lowered = {k.lower(): v for k, v in headers}
        content_type = lowered.get("content-type", "")
        sse = "text/event-stream" in content_type
        self.decoder = decoder = Decompressor(lowered.get("content-encoding", ""))
        self.plain = plain = decoder.readable and decoder.identity
        # The stream is edited (the injected usage chunk dropped) only when it is not compressed; otherwise it
        # goes through as sent and a decompressed copy is scanned.
        rename_to = ex.body.response_model if plain else None  # a renamed model's answers name the published one
        self.filt = SseUsageFilter(drop_usage_chunk=ex.body.injected_usage and plain,
                                   rename_to=rename_to) if sse and not translated_stream else None
        self._reads_stream = (self.filt is not None and plain) or translated_stream  # edits it as it passes
        self.scanner = None if sse else JsonUsageScanner(settings.max_response_scan_bytes)
        self.rewriter = (JsonModelRewriter(rename_to, settings.max_response_scan_bytes)
                         if rename_to is not None and not sse and "json" in content_type else None)
        self.status = status
        self._headers = response_header_pairs(headers, body_changed=(sse and plain) or self.rewriter is not None)
        # a door client's answer becomes Messages last, from what the other stages let out (gateway.formats)
        self.door = DoorTranslator(status, self._headers, limit=settings.max_response_scan_bytes) \
            if ex.door_translated else None
        self.termination: Termination = "complete"
        self._guard: OutputGuard | None = None
        self._out: _Collect | None = None
        self._start_pending = False
        if ex.guard is not None:  # output rails around the answer (gateway/guardrails.py)
            self._out = _Collect()
            self._guard = OutputGuard(pipeline.plane.guardrails, ex.guard, self._out,
                                      settings.guardrails_stream_chunk_chars)
            self._start_pending = True
        self._closed = False
        ex.response = self

    @property
    def headers(self) -> list[tuple[str, str]]:
        """The head the client gets (a door client's: Messages)."""
        if self.door is None:
            return self._headers
        return DoorTranslator.edit_headers(self._headers, self.door.streaming)

    @property
    def _translates_whole(self) -> bool:
        return (self.translator is not None and not self.translator.streaming) or \
            (self.door is not None and not self.door.streaming)

    @property
    def _reading_whole(self) -> bool:
        """A translated answer read whole: nothing goes out before the provider's body has ended."""
        return self._translates_whole and not self._closed

    @property
    def held(self) -> bool:
        """True while output guardrails or a whole-answer translation hold the head (the answer and its
        status may still change)."""
        return self._reading_whole or (self._out is not None and self._out.start is None)

    @property
    def whole(self) -> bool:
        """True when output guardrails read this answer whole and may answer with a head of their own (a JSON
        answer, a stream they cannot read); False without rails or for a stream they read (they refuse it
        in-band: an error event). A front that answers the head before the body (ext_proc STREAMED) holds such
        an answer whole first (the processor's `mode_override` to BUFFERED)."""
        if self._translates_whole:
            return True
        return self._guard is not None and not self._reads_stream

    async def _through_guard(self, chunk: bytes, more: bool) -> bytes:
        assert self._guard is not None and self._out is not None
        if self._start_pending:  # the head as it stands now (a whole translation may have changed it)
            self._start_pending = False
            await self._guard({"type": "http.response.start", "status": self.status,
                               "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self._headers]})
        held = self._out.start is None
        await self._guard({"type": "http.response.body", "body": chunk, "more_body": more})
        if held and self._out.start is not None:  # the head the rails let out (maybe their refusal's)
            self.status = int(self._out.start["status"])
            self._headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self._out.start["headers"]]
        return self._out.take()

    async def feed(self, chunk: bytes) -> bytes:
        """One chunk of the upstream body in; the bytes for the client out (maybe none yet)."""
        if self.translator is not None:
            chunk = self.translator.feed(chunk)
            if not self.translator.streaming:
                return b""
        out = await self._pass(chunk)
        return self.door.feed(out) if self.door is not None else out

    async def _pass(self, chunk: bytes) -> bytes:
        """The stages after translation: usage scan, usage chunk drop, rename, output guardrails."""
        filt = self.filt
        if filt is not None and self.plain:
            chunk = filt.feed(chunk)
        elif filt is not None:
            filt.feed(self.decoder.feed(chunk))
        elif self.scanner is not None:
            self.scanner.feed(self.decoder.feed(chunk))
            if self.rewriter is not None:
                chunk = self.rewriter.feed(chunk)
        if self._guard is not None:
            return await self._through_guard(chunk, True) if chunk or self._start_pending else b""
        return chunk

    async def close(self) -> bytes:
        """The upstream body ended: the last bytes for the client."""
        head = b""
        if self.translator is not None:
            if self.translator.streaming and not self.translator.stream_ended and self.translator.stream_usage is None:
                self.termination = "truncated"
            translated = self.translator.close()
            if not self.translator.streaming:  # a whole answer's status is known now (an error's may change)
                self.status = self.translator.status
            self._closed = True
            head = await self._pass(translated)
        filt = self.filt
        tail = filt.close() if filt is not None and self.plain else \
            self.rewriter.close() if self.rewriter is not None else b""
        if filt is not None and not filt.done and filt.usage is None:
            self.termination = "truncated"
        return self._door_close(head + (await self._through_guard(tail, False) if self._guard is not None else tail))

    def _door_close(self, out: bytes) -> bytes:
        """The last Chat bytes through the door (a whole answer: translated now, its status mapped)."""
        if self.door is None:
            return out
        out = self.door.feed(out)
        guard = self.ex.guard
        replaced = guard is not None and guard.client_status is not None  # the data plane's refusal, not the provider's
        status, rest = self.door.close(self.status, from_provider=not replaced)
        if not self.door.streaming:
            self.status = status
        self._closed = True
        return out + rest

    async def abort(self) -> bytes:
        """The upstream stream broke after the head: what is left for the client (held text the rails pass)."""
        self.termination = "truncated"
        if self._reading_whole:  # a whole-answer translation never got its whole answer: nothing to translate
            self._closed = True
            self.status = 502
            broken = error_body(502, "the provider's answer broke off before its end", "upstream_malformed")
            return self._door_close(await self._through_guard(broken, False) if self._guard is not None else broken)
        self._closed = True
        return self._door_close(await self._through_guard(b"", False) if self._guard is not None else b"")

    @property
    def usage(self) -> Any:
        """The answer's `usage` as read so far (None when it could not be read)."""
        if self.translator is not None and self.translator.streaming:
            return self.translator.stream_usage
        if not self.decoder.readable:
            return None
        if self.filt is not None:
            return self.filt.usage
        if self.rewriter is not None and self.rewriter.answer is not None:  # parsed already: not a second time
            return self.rewriter.answer.get("usage")
        return self.scanner.usage if self.scanner is not None else None


# --- the pipeline ----------------------------------------------------------------------------------------


class Pipeline:
    """The stages over a `Plane`. One per process; an exchange per request."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self.relay_token = relay_token(plane.settings.maas_api_token or plane.settings.relay_secret)

    def exchange(self, method: str, raw_path: bytes, query: str, headers: list[tuple[str, str]],
                 scheme: str = "http", *, dry: bool = False) -> Exchange:
        """A request as received (`headers`: names lowercased; values as sent)."""
        raw = [(name, canonical_authorization(value) if name == "authorization" else value)
               for name, value in headers]
        joined: dict[str, str] = {}
        for name, value in raw:
            joined[name] = f"{joined[name]},{value}" if name in joined else value
        ex = Exchange(method, raw_path, query, raw, joined, scheme, dry)
        try:
            ex.path = canonical_path(raw_path.split(b"?", 1)[0])
        except AmbiguousPath as exc:
            ex.path_error = str(exc)
        ex.door = is_door(ex.path)
        return ex

    async def _run(self, stages: tuple[Stage, ...], ex: Exchange, role: Role) -> Refusal | None:
        """`stages`: those `role` runs (HEAD_BY_ROLE / BODY_BY_ROLE)."""
        ex.role = role
        for stage in stages:
            refusal = await stage.run(self, ex)
            if refusal is not None:
                return self.shaped(ex, refusal)
        return None

    def shaped(self, ex: Exchange, refusal: Refusal) -> Refusal:
        """`refusal` in the client's format: Anthropic's error shape at the Messages door."""
        return door_refusal(refusal) if ex.door else refusal

    async def request_head(self, ex: Exchange, role: Role = "all") -> Refusal | None:
        """Edge, route, auth, metering: what needs no body. Role "processor" on the post stream: call
        `adopt_identity` first (an exchange Authorino did not admit is refused here, never served unbilled)."""
        refusal = await self._run(HEAD_BY_ROLE[role], ex, role)
        if refusal is None and role == "processor" and not ex.authorized \
                and not self.plane.settings.serve_routes_without_auth_policy:
            return self.shaped(ex, _refuse(403, "identity_missing",
                                           "the request carries no identity from the authorization stage"))
        return refusal

    async def request_body(self, ex: Exchange, raw: bytes, role: Role = "all") -> Refusal | None:
        """Body, limits, reservation, input guardrails. A refusal after a reservation has been settled and
        recorded by `finish` only when the front calls it (it always should)."""
        ex.raw_body = raw
        if role == "envoy":  # the body is the processor's to prepare: it goes on as sent
            ex.body = PreparedBody(raw, prompt_estimate=max(1, len(raw) // 4))
        return await self._run(BODY_BY_ROLE[role], ex, role)

    def adopt_identity(self, ex: Exchange, value: str) -> None:
        """Role "processor": take the auth outcome from `x-maas-identity` (raises InvalidIdentityHeader) and
        drop the header from what goes upstream."""
        carried = ids.decode_identity_header(value)
        filters = {**carried.filters, ids.FILTER: dict(carried.identity)}  # the exported filters, as Authorino's
        ex.outcome = AuthOutcome(True, reason="x-maas-identity", filters=filters,
                                 auth={"metadata": {ids.SUBSCRIPTION_INFO: dict(carried.subscription_info)}})
        ex.authorized = True
        ex.raw_headers = [(n, v) for n, v in ex.raw_headers if n != ids.HEADER]
        ex.headers.pop(ids.HEADER, None)

    def routes_by_body(self, ex: Exchange) -> bool:
        """True when the route is chosen by the body's `model` (a base-URL path): set `ex.raw_body` before
        `request_head` (the processor: from its "pre" stream's buffered body)."""
        return ex.path is not None and is_base_inference_path(ex.path)

    def too_large(self, ex: Exchange) -> Refusal:
        """The answer to a body over `max_request_bytes` (a front that stops reading gives it)."""
        return self.shaped(ex, _refuse(413, "body_too_large", "request body too large"))

    def upstream_request(self, ex: Exchange) -> UpstreamRequest:
        """The request to forward: headers by the header contract (`contract.edge.upstream_headers`), the
        provider key, the prepared body (stream usage asked for, a renamed model's upstream name)."""
        assert ex.match is not None
        rule = ex.match.rule
        out = upstream_headers(ex.raw_headers, ex.outcome.headers, forward_credentials=rule.forward_credentials,
                               set_headers=rule.set_headers, add_headers=rule.add_headers,
                               remove_headers=(*rule.remove_headers, "accept-encoding"), upstream_key=ex.upstream_key,
                               key_scheme=rule.key_scheme)
        out.append(("accept-encoding", "identity"))  # usage is read from the answer: no compression
        if ex.translated:  # the client's anthropic-* headers are for another API than the one it called
            out = [(n, v) for n, v in out if not n.startswith("anthropic-")]
            out.append(("anthropic-version", ANTHROPIC_VERSION))
        if ex.body.content != ex.raw_body:
            out = [(n, v) for n, v in out if n != "content-type"]
            out.append(("content-type", "application/json"))
        if rule.rewrite_hostname:
            out.append(("host", rule.rewrite_hostname))
        if rule.providers is not None and ex.role == "processor":  # to the provider relay, which demands it
            out += [(RELAY_TOKEN_HEADER, self.relay_token), (RELAY_ROUTE_HEADER, rule.route_key)]
        timeout = rule.timeout if rule.timeout is not None else self.plane.settings.upstream_timeout
        return UpstreamRequest(ex.match.upstream_path + (f"?{ex.query}" if ex.query else ""), out,
                               ex.body.content, ex.backend.base_url if ex.backend is not None else "", timeout or None)

    def response(self, ex: Exchange, status: int, headers: list[tuple[str, str]]) -> ResponsePass:
        return ResponsePass(self, ex, status, headers)

    def release(self, ex: Exchange) -> None:
        """Give back what the exchange holds besides counters (its guardrails slot); idempotent, and `finish`
        does it too: a front calls it in a `finally` for paths that may not reach `finish`."""
        if ex.guard is not None:
            ex.guard.release()

    async def finish(self, ex: Exchange, status: int, termination: Termination) -> None:
        """Charge the counters (the answer's usage, else a conservative estimate), release the reservation and
        the guardrails slot, and emit the usage record (always one for an admitted request: `usage_record`; an
        unrecorded request is unbilled)."""
        try:
            if ex.admitted and not ex.dry and ex.role != "envoy":  # the processor settles and records
                await self._record(ex, status, termination)
        finally:
            self.release(ex)

    async def _record(self, ex: Exchange, status: int, termination: Termination) -> None:
        plane = self.plane
        usage = ex.response.usage if ex.response is not None else None
        if ex.response is not None and (ex.response.translator is not None or ex.response.door is not None):
            status = ex.response.status  # what the client got (a translated error's status may differ)
        charge = charge_for(status, usage, ex.body, termination, completion_ceiling=_ceiling(self, ex))
        await plane.limiter.settle(ex.reservation, ex.applied, charge.charged)
        guard = ex.guard
        if guard is not None and guard.client_status is not None:  # a guardrail replaced the upstream answer
            status = guard.client_status if guard.client_status != 200 else status
            termination = "refused"
        identity = ex.outcome.filters.get(ids.FILTER) or {}
        if not isinstance(identity, Mapping):
            identity = {}
        sub_info = (ex.outcome.auth.get("metadata") or {}).get(ids.SUBSCRIPTION_INFO) or {}
        if not isinstance(sub_info, Mapping):
            sub_info = {}
        labels = sub_info.get(ids.INFO_LABELS)
        assert ex.match is not None
        record = usage_record({
            "timestamp": time.time(),
            "request_id": ex.request_id,
            "user": str(identity.get(ids.USERID, "")),
            "key_id": str(identity.get(ids.KEY_ID, "")),
            "subscription": ids.subscription_of(identity),
            "organization": str(sub_info.get(ids.INFO_ORGANIZATION) or ""),
            "cost_center": str(sub_info.get(ids.INFO_COST_CENTER) or ""),
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
            "provider": ex.provider,
            **charge.numbers,
        })
        plane.telemetry.observe(record)
        plane.sink.emit(record)
        if guard is not None and guard.prompt_tokens + guard.completion_tokens > 0:
            # guardrails: the guard model's tokens, metered on their own record, never charged to the quota
            guard_record = record.model_copy(update={
                "request_id": f"{ex.request_id}-guard",
                "model": fit_text(f"guardrails/{guard.binding.config}", BOUNDS.strings["model"]),
                "input_tokens": guard.prompt_tokens, "output_tokens": guard.completion_tokens,
                "total_tokens": guard.prompt_tokens + guard.completion_tokens, "cached_tokens": 0,
                "reasoning_tokens": 0, "charged_tokens": 0, "estimated": False, "estimate_reason": "",
                "status": 200, "streamed": False, "termination": "complete"})
            plane.sink.emit(guard_record)


def billed_model(route_model: str | None, identity: Mapping[str, Any]) -> str:
    """The MaaSModelRef (`ns/name`) a request is recorded against: the route's model label (routes the
    controller generates), else the model the AuthPolicy that admitted the request was generated for (the part
    after `@` of `selected_subscription_key`; KServe-owned routes carry no label of ours). Never the `model` of
    the request body: that is the caller's claim, and billing by model would let a caller pick its price."""
    if route_model:
        return route_model
    _, at, model = str(identity.get(ids.SELECTED_SUBSCRIPTION_KEY) or "").partition("@")
    return model if at else ""
