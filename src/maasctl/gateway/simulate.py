"""`simulate`: what the gateway would do with a request, without sending it or spending quota.

For a caller (an API key, a bearer token, or a user name plus groups) and a model (`namespace/name` of the
MaaSModelRef, or a request path), it runs the gateway's own pipeline (`gateway.pipeline`) dry: the same stages
in the same order, with the live counters read and nothing reserved, counted, forwarded or sent to the
guardrails engine, so its verdict cannot drift from the gateway's (tests/gateway/test_simulate_equals_gateway.py).
It reports: the route and upstream path, the decision and the rule behind it, the selected subscription, the
identity exported to rate limiting, every applicable limit with used/remaining quota and reset time per window,
and the verdict with the gateway's status and error code (allowed, or the refusal and why). Optional `headers`
and `body` are the request's own (a forbidden header, a body too large or unreadable are refused as the
gateway refuses them). A model published on a route without a model label of ours (a KServe-owned route) is
found through the AuthPolicy generated for it.

User+groups callers skip authentication (the identity is taken as a TokenReview would return it, extended as the
route's TokenReview entry extends it, so a billing Plan's fail-closed rule refuses it where it refuses that
user's token); the maas-api callbacks are still made (they only read). Operators reach it with `maasctl
simulate`, which posts to a running gateway's `/_gateway/simulate` (`simulate_remote`), so the numbers are the
live ones.

Who may ask (`SimulateAuthority`; besides the endpoint's loopback-only default): a verdict and its counters are
shown only to their owner or an administrator. A request naming a `key` or `token` carries the very credential
it simulates, so its caller is that caller (an invalid one is simulated as the 401 it gets). A `user` (with
`groups`) is an identity nobody proved: only an administrator may ask for it, with `Authorization: Bearer
<Kubernetes token>` of a user who passes the MaaS admin check (`contract.admin`: `create maasauthpolicies` in
the subscription namespace); no credential is 401, an API key or anyone else's token 403. The request body
is one JSON object with the known fields, each of its type, nested at most `MAX_JSON_DEPTH` deep; anything
else is 400 (never a 500).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Protocol

import aiohttp
import httpx

from maasctl.contract import identity as ids
from maasctl.contract.admin import admin_access_review
from maasctl.contract.edge import API_KEY_PREFIX, presented_credential
from maasctl.contract.errors import Refusal
from maasctl.contract.guardrails import binding_from_filters
from maasctl.contract.labels import MODEL_LABEL, MODEL_NAMESPACE_LABEL
from maasctl.dataplane.body import read_json_object
from maasctl.dataplane.routing import is_base_inference_path
from maasctl.gateway.auth import AuthServiceUnavailable
from maasctl.gateway.expressions import PolicyError
from maasctl.gateway.formats import is_door
from maasctl.gateway.pipeline import Exchange, Pipeline
from maasctl.gateway.ratelimit import TokenRateLimiter
from maasctl.gateway.state import AUTH_POLICY, GatewayState
from maasctl.runtime import ApiError

__all__ = [
    "SIMULATE_BODY_LIMIT",
    "Enforcer",
    "SimulateAuthority",
    "SimulateRefused",
    "SimulateRequest",
    "SimulationReport",
    "format_report",
    "simulate",
    "simulate_remote",
]

log = logging.getLogger("maasctl.gateway.simulate")
SIMULATE_BODY_LIMIT: Final = 64 * 1024
_TEXT_FIELDS: Final = ("key", "token", "user", "subscription", "endpoint", "host")


class Enforcer(Protocol):
    """What simulate reads of a running gateway (`server.Gateway` is one): the very pipeline it serves with."""

    state: GatewayState
    limiter: TokenRateLimiter
    pipeline: Pipeline


@dataclass(frozen=True)
class SimulateRequest:
    """Who calls which model. Exactly one of key, token or user."""

    model: str  # namespace/name of the MaaSModelRef, or a path starting with "/"
    key: str | None = None
    token: str | None = None
    user: str | None = None
    groups: tuple[str, ...] = ()
    subscription: str | None = None  # X-MaaS-Subscription
    endpoint: str = "/chat/completions"  # appended to the route's path prefix
    host: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # more request headers, as the client would send them
    body: Any = None  # the request body (a JSON value); None: no body

    @classmethod
    def from_bytes(cls, raw: bytes) -> SimulateRequest:
        """The request of a `/_gateway/simulate` body; ValueError for anything but one JSON object of the known
        fields (too deep, not UTF-8, an array, a field of the wrong type)."""
        return cls.from_json(read_json_object(raw))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimulateRequest:
        if not isinstance(data, Mapping):
            raise ValueError("the request must be a JSON object")
        allowed = {"model", "key", "token", "user", "groups", "subscription", "endpoint", "host", "headers", "body"}
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        if not isinstance(data.get("model"), str):
            raise ValueError("model is required")
        for name in _TEXT_FIELDS:
            if data.get(name) is not None and not isinstance(data[name], str):
                raise ValueError(f"{name} must be a string")
        groups = data.get("groups") or ()
        if not isinstance(groups, list | tuple) or not all(isinstance(g, str) for g in groups):
            raise ValueError("groups must be a list of strings")
        headers = data.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
            raise ValueError("headers must be an object of strings")
        req = cls(
            model=data["model"],
            key=data.get("key"),
            token=data.get("token"),
            user=data.get("user"),
            groups=tuple(groups),
            subscription=data.get("subscription"),
            endpoint=str(data.get("endpoint") or "/chat/completions"),
            host=data.get("host"),
            headers=tuple((str(k), v) for k, v in headers.items()),
            body=data.get("body"),
        )
        if sum(x is not None for x in (req.key, req.token, req.user)) != 1:
            raise ValueError("give exactly one of key, token or user")
        return req

    def to_json(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v is not None}
        out["headers"] = dict(self.headers)
        return out


@dataclass
class SimulationReport:
    """The answer; `status` is what the request would get (200 when it would reach the model)."""

    status: int
    verdict: str
    code: str = ""  # the error code of the gateway's answer ("" when allowed)
    route: str | None = None
    path: str | None = None
    upstream_path: str | None = None
    auth_policy: str | None = None
    auth_reason: str = ""
    subscription: str | None = None
    subscription_error: str | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    rate_limit_policy: str | None = None
    limits: list[dict[str, Any]] = field(default_factory=list)
    request_limit_policy: str | None = None  # the route's RateLimitPolicy (billing Plans: requests per minute)
    request_limits: list[dict[str, Any]] = field(default_factory=list)  # its counters, as `limits`
    guardrails: dict[str, Any] | None = None  # the GuardrailConfig checking this request (None: not guarded)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _path_for(gateway: Enforcer, request: SimulateRequest) -> tuple[str, str]:
    """(host, path) of a request to the model: the route whose rule serves it (its model label, or the route
    named), else the HTTPRoute an AuthPolicy generated for the model targets (a KServe-owned route carries no
    label of ours: the sample in-cluster model `llm/granite`)."""
    if request.model.startswith("/"):
        return request.host or "", request.model
    table = gateway.state.snapshot().table
    route = _route_of_model(gateway, request.model)
    # the model's own path first, its Messages door last (simulate asks in OpenAI's format)
    for rule in sorted(table.rules, key=lambda r: (is_base_inference_path(r.path), is_door(r.path))):
        if rule.model == request.model or rule.route_key in (request.model, route):
            host = request.host or (rule.hostnames[0] if rule.hostnames and "*" not in rule.hostnames[0] else "")
            path = rule.path if rule.path_type == "Exact" else rule.path.rstrip("/") + request.endpoint
            return host, path
    raise LookupError(f"no route on the gateway serves model {request.model}")


def _route_of_model(gateway: Enforcer, model: str) -> str | None:
    """`ns/name` of the HTTPRoute targeted by an AuthPolicy generated for `model` (`ns/name`)."""
    namespace, _, name = model.partition("/")
    for policy in gateway.state.cache.list(AUTH_POLICY, namespace or None):
        labels = (policy.get("metadata") or {}).get("labels") or {}
        target = (policy.get("spec") or {}).get("targetRef") or {}
        if labels.get(MODEL_LABEL) == name and labels.get(MODEL_NAMESPACE_LABEL, namespace) == namespace \
                and target.get("kind") == "HTTPRoute":
            return f"{policy['metadata'].get('namespace', namespace)}/{target.get('name')}"
    return None


def _verdict(ex: Exchange, refusal: Refusal) -> str:
    """Why the request is refused, as an operator reads it."""
    if refusal.status in (401, 403) and ex.policy is not None and not ex.outcome.allowed:
        return f"denied by AuthPolicy ({ex.outcome.message}): {ex.outcome.reason}"
    denial = ex.denial
    if denial is not None:
        kind = "request" if refusal.message.startswith("request limit") else "tokens"
        return (f"rate limited: {denial.used} {kind} used of {denial.limit} per {denial.window} "
                f"in limit {denial.limit_name}; retry in {denial.retry_after}s")
    return refusal.message


async def simulate(gateway: Enforcer, request: SimulateRequest) -> SimulationReport:
    """Run the gateway's own stages (`gateway.pipeline`) dry on `request`: counters are read, nothing is
    reserved, counted, forwarded or sent to the guardrails engine."""
    try:
        host, path = _path_for(gateway, request)
    except LookupError as exc:
        return SimulationReport(404, str(exc), code="route_not_found")
    headers = [("host", host), ("content-type", "application/json")]
    if request.key or request.token:
        headers.append(("authorization", f"Bearer {request.key or request.token}"))
    if request.subscription:
        headers.append(("x-maas-subscription", request.subscription))
    headers += [(k.lower(), v) for k, v in request.headers]
    pipeline = gateway.pipeline
    ex = pipeline.exchange("POST", path.encode("utf-8"), "", headers, dry=True)
    if request.user is not None:
        ex.identity_override = {"authenticated": True,
                                "user": {"username": request.user, "groups": list(request.groups)}}
    report = SimulationReport(200, "allowed", path=path)
    body = b"" if request.body is None else json.dumps(request.body).encode()
    if pipeline.routes_by_body(ex):
        ex.raw_body = body
    refusal = await pipeline.request_head(ex)
    if ex.match is not None:
        report.route, report.upstream_path = ex.route, ex.match.upstream_path
    if ex.policy is not None:
        report.auth_policy = ex.policy.key
    report.auth_reason = ex.outcome.reason
    sub_info = (ex.outcome.auth.get("metadata") or {}).get(ids.SUBSCRIPTION_INFO)
    if isinstance(sub_info, Mapping):
        if sub_info.get("name"):
            report.subscription = f"{sub_info.get('namespace', '')}/{sub_info['name']}"
        if sub_info.get("error"):
            report.subscription_error = f"{sub_info.get('error')}: {sub_info.get('message', '')}"
    identity = ex.outcome.filters.get(ids.FILTER)
    report.identity = dict(identity) if isinstance(identity, Mapping) else {}
    guard = binding_from_filters(ex.outcome.filters) if ex.outcome.allowed else None  # guardrails apply?
    report.guardrails = guard.to_json() if guard is not None else None
    if refusal is None:
        refusal = await pipeline.request_body(ex, body)
    if ex.trlp is not None:
        report.rate_limit_policy = ex.trlp.key
        applied = ex.applied if ex.applied or ex.request is None else \
            gateway.limiter.applicable(ex.trlp, ex.route, ex.activation())
        report.limits = [asdict(s) for s in await gateway.limiter.states(applied)]
        for item in applied:
            if not item.limit.rates:
                report.limits.append({"limit_name": item.limit.name, "unlimited": True})
    await _request_counters(gateway, ex, report)
    if refusal is not None:
        report.status, report.code, report.verdict = refusal.status, refusal.code, _verdict(ex, refusal)
    elif ex.trlp is None:
        report.verdict = "allowed (no token rate limit on this route)"
    elif not ex.applied:
        report.verdict = "allowed (no limit of the policy applies to this caller)"
    return report


async def _request_counters(gateway: Enforcer, ex: Exchange, report: SimulationReport) -> None:
    """The route's RateLimitPolicy and the used and remaining requests of each of its limits that applies to
    the caller (read from the same counters the gateway admits with; nothing counted)."""
    rlp = ex.snap.requests.get(ex.route) if ex.snap is not None and ex.route else None
    if rlp is None or isinstance(rlp, PolicyError) or ex.request is None:
        return
    report.request_limit_policy = rlp.key
    requests = gateway.pipeline.plane.requests
    applied = requests.applicable(rlp, ex.route, ex.activation())
    report.request_limits = [asdict(s) for s in await requests.states(applied)]


class SimulateRefused(Exception):
    """The caller may not see this simulation (answered with `status` and `code`)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


TokenReview = Callable[[str, tuple[str, ...]], Awaitable[Mapping[str, Any] | None]]
Create = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class SimulateAuthority:
    """Decides who may see a simulation (see the module docstring): `review` is the gateway's TokenReview,
    `create` creates an API object (the SubjectAccessReview), `namespace` the subscription namespace."""

    review: TokenReview
    create: Create
    namespace: str

    async def authorize(self, request: SimulateRequest, authorization: str | None) -> None:
        """Return when the caller may see `request`'s simulation; raise SimulateRefused otherwise."""
        if request.user is None:
            return  # key or token: the request carries the credential it simulates
        token = presented_credential(authorization, None)
        if token is None:
            raise SimulateRefused(401, "simulating a user needs an administrator's token (Authorization: Bearer)",
                                  "unauthenticated")
        if token.startswith(API_KEY_PREFIX):
            raise SimulateRefused(403, "simulating a user needs an administrator's Kubernetes token, not an API key",
                                  "forbidden")
        try:
            status = await self.review(token, ())
            user = (status or {}).get("user") or {}
            name, groups = user.get("username"), user.get("groups") or []
            if not isinstance(name, str) or not name:
                raise SimulateRefused(401, "the token is not valid", "unauthenticated")
            answer = await self.create(admin_access_review(name, [str(g) for g in groups], self.namespace))
        except (AuthServiceUnavailable, ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("simulate: the admin check failed: %s", type(exc).__name__)
            raise SimulateRefused(503, "the admin check is unavailable, retry later", "auth_unavailable") from exc
        if not (answer.get("status") or {}).get("allowed"):
            raise SimulateRefused(403, "only an administrator may simulate another user", "forbidden")


async def simulate_remote(gateway_url: str, request: SimulateRequest, timeout: float = 10.0, *,
                          admin_token: str | None = None) -> SimulationReport:
    """Ask a running gateway (`POST <gateway_url>/_gateway/simulate`); `admin_token` (a Kubernetes token of a
    MaaS administrator) is needed to simulate a user and groups."""
    headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
    async with httpx.AsyncClient(timeout=timeout) as http:
        response = await http.post(gateway_url.rstrip("/") + "/_gateway/simulate", json=request.to_json(),
                                   headers=headers)
    if response.status_code != 200:
        raise RuntimeError(f"simulate failed: HTTP {response.status_code} {response.text[:200]}")
    return SimulationReport(**response.json())


def _limit_lines(limits: list[dict[str, Any]]) -> list[str]:
    lines = []
    for limit in limits:
        if limit.get("unlimited"):
            lines.append(f"  {limit['limit_name']}: unlimited (metered only)")
            continue
        reset = "window not started" if limit["resets_in"] is None else f"resets in {limit['resets_in']:.0f}s"
        flag = "  OVER" if limit["over"] else ""
        lines.append(
            f"  {limit['limit_name']} {limit['limit']}/{limit['window']}: used {limit['used']}, "
            f"remaining {limit['remaining']}, {reset}{flag}"
        )
    return lines


def format_report(report: SimulationReport) -> str:
    """Human-readable lines for `maasctl simulate`."""
    lines = [f"verdict:      {report.status} {report.verdict}"]
    for label, value in (
        ("route", report.route),
        ("path", report.path),
        ("upstream", report.upstream_path),
        ("auth policy", report.auth_policy),
        ("auth", report.auth_reason),
        ("subscription", report.subscription or report.subscription_error),
        ("rate limits", report.rate_limit_policy),
    ):
        if value:
            lines.append(f"{label + ':':<13} {value}")
    lines += _limit_lines(report.limits)
    if report.request_limit_policy:
        lines.append(f"{'request limits:':<13} {report.request_limit_policy}")
        lines += _limit_lines(report.request_limits)
    guard = report.guardrails
    if guard is None:
        lines.append(f"{'guardrails:':<13} none (not guarded for this subscription)")
    else:
        state = "ready" if guard.get("ready") else "NOT AVAILABLE: requests are refused (503)"
        lines.append(f"{'guardrails:':<13} config {guard.get('config')} ({state}), {guard.get('failurePolicy')}, "
                     f"input and output rails, engine {guard.get('url')}")
    return "\n".join(lines)
