"""The pipeline's stages as the processor runs them: which stage of `gateway.pipeline` runs in which filter.

pre (before Kuadrant's wasm, on what the client sent): the edge headers guard, then base-URL routing: the body's
`model` into `x-gateway-model-name` (the pipeline's `route_by_model`) - or, for an in-cluster model, `:path` set
to the model's own path - sent as a header mutation that clears Envoy's route cache
(`modes.PRE.clears_route_cache`), so Envoy matches the model's route and Authorino and Limitador run that
route's policies.
On such a path the post stream's head stages wait for the body (`deferred_head`); behind Envoy the route
is matched by the header the pre filter set (the body stage refuses a body naming another model).

post (after Authorino and Limitador): the route is matched again (the processor needs the rule: model, rename,
provider key Secret, TRLP), the identity is the one Authorino injected (`x-maas-identity`, `contract.identity`)
instead of an auth check, then the pipeline's `processor` stages - the model listing (`GET <model path>/v1/models`
of a model whose provider cannot answer it, answered here), metering, body, provider key, token reservation,
input guardrails - plus the two data stages they read (limits valid: the TRLP; backend: the rule's backend).
Request limits (RateLimitPolicy) stay Limitador's. Every stage is the pipeline's own function, looked
up by name in `STAGES`: nothing is re-implemented here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from maasctl.contract import identity as ids
from maasctl.contract.edge import server_decided
from maasctl.contract.errors import Refusal
from maasctl.contract.routing import MODEL_HEADER
from maasctl.contract.usage import Termination
from maasctl.gateway.auth import AuthOutcome
from maasctl.gateway.authpolicy import CompiledAuthPolicy
from maasctl.gateway.pipeline import STAGES, Exchange, Pipeline, ResponsePass, Stage, route_by_model
from maasctl.payload.stages import Headers

__all__ = ["POST_BODY", "POST_HEAD", "PRE_HEAD", "FilterExchange", "ProcessorStages"]

_BY_NAME: Final = {s.name: s for s in STAGES}


def _stages(*names: str) -> tuple[Stage, ...]:
    return tuple(_BY_NAME[n] for n in names)  # a KeyError at import: a stage was renamed in the pipeline


PRE_HEAD: Final = _stages("edge")
POST_HEAD: Final = _stages("route")  # then the injected identity, then the model listing and metering
POST_ADMITTED: Final = _stages("model listing", "metering")
POST_BODY: Final = _stages("body", "limits valid", "backend", "provider key", "token reservation", "input guardrails")


@dataclass
class FilterExchange:
    """One filter stream's exchange: the pipeline's, plus what only a filter knows - the headers as Envoy sent
    them (a pre stream passes them on untouched), which filter it is, and whether the head stages wait for the
    body (a base-URL path on the post stream, routed by the body's `model`)."""

    ex: Exchange
    sent: list[tuple[str, str]]
    pre: bool = False
    deferred_head: bool = False


@dataclass(frozen=True)
class _Passed:
    """What a pre stream forwards: the request as Envoy sent it."""

    headers: Headers
    body: bytes


class ProcessorStages:
    """`payload.stages.Pipeline` over the data-plane pipeline, for the two filters (`role` = `pre` | `post`)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def exchange(self, method: str, raw_path: bytes, query: str, headers: Headers, scheme: str) -> FilterExchange:
        ex = self.pipeline.exchange(method, raw_path, query, list(headers), scheme)
        ex.role = "processor"  # behind Envoy: the stages run here by name, not through request_head's roles
        return FilterExchange(ex, list(headers))

    async def _run(self, stages: tuple[Stage, ...], ex: Exchange) -> Refusal | None:
        for stage in stages:
            refusal = await stage.run(self.pipeline, ex)
            if refusal is not None:
                return refusal
        return None

    async def request_head(self, fx: FilterExchange, role: str) -> Refusal | None:
        if role == "pre":
            fx.pre = True
            return await self._run(PRE_HEAD, fx.ex)
        if self.pipeline.routes_by_body(fx.ex):  # the route is the body's `model`: matched with the body
            fx.deferred_head = True
            return None
        return await self._post_head(fx.ex)

    async def _post_head(self, ex: Exchange) -> Refusal | None:
        refusal = await self._run(POST_HEAD, ex) or self._identity(ex)
        return refusal or await self._run(POST_ADMITTED, ex)

    def _identity(self, ex: Exchange) -> Refusal | None:
        """The auth outcome Authorino decided, as it injected it (`Pipeline.adopt_identity`): the identity filter
        and the AuthPolicy's other exported filters whole (`guardrails`, a Plan's `billing` with the key's labels),
        so the limits and rails here read what Limitador and Authorino read. A route with an AuthPolicy and no
        identity was not admitted by Authorino (or the filter order is wrong): refused, never served
        unidentified. Added to it: Authorino's success headers (on the request already, they replaced any a
        client sent)."""
        assert ex.snap is not None
        policy = ex.snap.auth.get(ex.route)
        value = ex.headers.get(ids.HEADER)
        if value is None:
            if isinstance(policy, CompiledAuthPolicy):
                return Refusal(403, "identity_missing", "the request carries no identity from the authorizer")
            ex.outcome = AuthOutcome(True, reason="no AuthPolicy")
            return None
        try:
            self.pipeline.adopt_identity(ex, value)
        except ids.InvalidIdentityHeader:
            return Refusal(403, "identity_invalid", "the identity from the authorizer cannot be read")
        names = {item.name.lower() for item in policy.headers} if isinstance(policy, CompiledAuthPolicy) else set()
        ex.outcome.headers.update({k: v for k, v in ex.raw_headers if k in names or server_decided(k)})
        if isinstance(policy, CompiledAuthPolicy):
            ex.policy = policy
        return None

    async def request_body(self, fx: FilterExchange, body: bytes, role: str) -> Refusal | None:
        ex = fx.ex
        ex.raw_body = body
        if role == "pre":
            if len(body) > self.pipeline.plane.settings.max_request_bytes:
                return self.pipeline.too_large(ex)
            # a base-URL path: the body's model into the routing header, or an in-cluster model's own path
            # (sent by `upstream_request` as a header mutation, with Envoy's route cache cleared)
            return route_by_model(ex, self.pipeline.plane.state.snapshot())
        if fx.deferred_head:
            refusal = await self._post_head(ex)
            if refusal is not None:
                return refusal
        return await self._run(POST_BODY, ex)

    def upstream_request(self, fx: FilterExchange) -> Any:
        ex = fx.ex
        if fx.pre:  # pre: forwarded as sent, plus the routing header (or the model's own path) on a base-URL path
            if ex.rerouted:
                moved = (ex.path or "") + (f"?{ex.query}" if ex.query else "")
                return _Passed([*fx.sent, (":path", moved)], ex.raw_body)
            model = ex.headers.get(MODEL_HEADER) if self.pipeline.routes_by_body(ex) else None
            sent = [(k, v) for k, v in fx.sent if k != MODEL_HEADER]
            return _Passed([*sent, (MODEL_HEADER, model)] if model else fx.sent, ex.raw_body)
        return self.pipeline.upstream_request(ex)

    def response(self, fx: FilterExchange, status: int, headers: Headers) -> ResponsePass:
        return self.pipeline.response(fx.ex, status, list(headers))

    async def finish(self, fx: FilterExchange, status: int, termination: Termination) -> None:
        await self.pipeline.finish(fx.ex, status, termination)


