"""The AuthPolicy and TokenRateLimitPolicy of one model, rendered from all the sources that name it.

Kuadrant enforces one AuthPolicy and one TokenRateLimitPolicy per HTTPRoute, so a model's policies merge
every MaaSAuthPolicy (who may call it) and every MaaSSubscription (their limits) that references it. The
MaaSModelRef reconciler is their one writer: it finds the sources through the `MODEL_INDEX` cache index and
renders both from one cache snapshot, so two sources changing at once can never race two writers, and no
bookkeeping annotation is needed to know what to prune.

Sources count when they are in the subscription namespace, not being deleted, valid (`views`), and — for
subscriptions — their entry for this model has usable limits (`builders.trlp.subscription_problems`); one
broken source can never break the policy of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from maasctl.builders import names
from maasctl.builders.authpolicy import (
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    ObjectiveBinding,
    build_auth_policy,
    selection_epoch,
)
from maasctl.builders.celcheck import check_cel
from maasctl.builders.guardrails import GuardrailsAttachment, guardrails_filter
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.trlp import (
    RateTier,
    SubscriptionLimits,
    TokenRateLimitInput,
    build_token_rate_limit_policy,
    subscription_problems,
)
from maasctl.contract.cel import CelError
from maasctl.contract.routing import endpoint_prefix
from maasctl.contract.views import AuthPolicyView, SubscriptionView
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.flowcontrol import FlowControl
from maasctl.reconcilers.guardrails import config_ready, current_settings, engine_endpoint
from maasctl.reconcilers.indexes import MODEL_INDEX
from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    GUARDRAIL_CONFIG,
    MAAS_AUTH_POLICY,
    MAAS_MODEL_REF,
    MAAS_SUBSCRIPTION,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.reconcilers.routes import RouteResolution, model_alias
from maasctl.runtime import Cache

__all__ = ["ModelPolicies", "limits_for", "subscription_model_problems"]


def limits_for(sub: SubscriptionView, model: ObjectRef) -> SubscriptionLimits | None:
    """What `sub` contributes to `model`'s TokenRateLimitPolicy (None when it does not name the model)."""
    entry = sub.model(model.key)
    if entry is None:
        return None
    return SubscriptionLimits(
        subscription=ObjectRef(sub.namespace, sub.name),
        tiers=tuple(RateTier(t.limit, t.window) for t in entry.tiers),
        unlimited=entry.unlimited,
    )


def subscription_model_problems(sub: SubscriptionView, model: ObjectRef) -> list[str]:
    """Why `sub` cannot contribute to `model` (empty: it can)."""
    if sub.problem is not None:
        return [sub.problem]
    limits = limits_for(sub, model)
    if limits is None:
        return ["model not in spec.modelRefs"]
    return list(subscription_problems(limits))


@dataclass(frozen=True)
class Rendered:
    """Desired objects (None: delete) of one model."""

    auth_policy: dict[str, Any] | None
    trlp: dict[str, Any] | None


def _tenant_gateway(res: RouteResolution, default: GatewayRef) -> GatewayRef | None:
    """The route's only managed Gateway when that is a tenant one (None: requests count as the default's)."""
    sole = res.sole_gateway
    return sole if sole is not None and sole != default else None


class ModelPolicies:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.auth_settings = AuthSettings(maas_api_url=ctx.settings.maas_api_url)
        self.flow = FlowControl(ctx, ctx.gateway)

    def auth_sources(self, model: ObjectRef) -> list[AuthPolicyView]:
        views = (self.ctx.views.auth_policy(o) for o in
                 self.ctx.cache.list(MAAS_AUTH_POLICY, index=(MODEL_INDEX, model.key)) if self.ctx.in_scope(o))
        return sorted((v for v in views if v.grants), key=lambda v: v.key)

    def subscriptions(self, model: ObjectRef) -> list[SubscriptionView]:
        """In-scope, live subscriptions naming `model` (valid or not)."""
        views = (self.ctx.views.subscription(o) for o in
                 self.ctx.cache.list(MAAS_SUBSCRIPTION, index=(MODEL_INDEX, model.key)) if self.ctx.in_scope(o))
        return sorted((v for v in views if not v.deleting), key=lambda v: v.key)

    def objectives(self, model: ObjectRef, subs: Sequence[SubscriptionView]) -> tuple[ObjectiveBinding, ...]:
        """The InferenceObjective name of every subscription of `model` (`subs`) whose pool is known (seed
        000: the name is published, and carried by requests, even while `inferencePriority` is unset)."""
        out = []
        for sub in subs:
            if sub.problem is not None:
                continue
            name = self.flow.facts(sub, model).objective_name
            if name is not None:
                out.append(ObjectiveBinding(ObjectRef(sub.namespace, sub.name), name))
        return tuple(out)

    def guardrails(self, model: ObjectRef, subs: Sequence[SubscriptionView]) -> GuardrailsAttachment:
        """Which subscriptions of `model` (`subs`) check it with which GuardrailConfig (exported only while
        enabled)."""
        bindings = []
        for sub in subs:
            entry = sub.model(model.key) if sub.problem is None else None
            if entry is not None and entry.guardrails:
                bindings.append((ObjectRef(sub.namespace, sub.name), entry.guardrails))
        ns = self.ctx.settings.subscription_namespace
        ready = frozenset(c for _, c in bindings if config_ready(self.ctx.cache.get(GUARDRAIL_CONFIG, c, ns)))
        return GuardrailsAttachment(current_settings(self.ctx), engine_endpoint(self.ctx), tuple(bindings), ready)

    def base_url(self, model: ObjectRef, res: RouteResolution) -> tuple[str, str] | None:
        """An in-cluster model's (name clients send, its route's path prefix) for base-URL routing
        (`contract.routing`); None for an ExternalModel (its route has base-URL rules) or while the URL the
        LLMInferenceService reports has no usable path."""
        prefix = None if res.external else endpoint_prefix(res.endpoint)
        mr = self.ctx.cache.get(MAAS_MODEL_REF, model.name, model.namespace) if prefix is not None else None
        return (model_alias(self.ctx.cache, mr), prefix) if mr is not None and prefix is not None else None

    def render(self, model: ObjectRef, res: RouteResolution) -> Rendered:
        """Both desired policies of a resolved model.

        Raises:
            InvalidInputError, CelError: the builders refused an input (reported by the caller).
        """
        assert res.route is not None
        subs = self.subscriptions(model)  # one snapshot for every part below
        auth = tuple(
            AuthPolicySource(ObjectRef(v.namespace, v.name), tuple(sorted(v.users)), tuple(sorted(v.groups)))
            for v in self.auth_sources(model)
        )
        auth_policy = build_auth_policy(
            AuthPolicyInput(model, res.route, auth, self.objectives(model, subs),
                            guardrails_filter(self.guardrails(model, subs)),
                            tenant_gateway=_tenant_gateway(res, self.ctx.gateway),
                            selection_epoch=selection_epoch(subs), base_url=self.base_url(model, res)),
            self.auth_settings)
        limits = tuple(
            limits
            for sub in subs
            if not subscription_model_problems(sub, model) and (limits := limits_for(sub, model)) is not None
        )
        trlp = build_token_rate_limit_policy(TokenRateLimitInput(
            model=model, route=res.route, subscriptions=limits,
            gateway=res.gateway or (res.gateways[0] if res.gateways else None)))
        for desired in (auth_policy, trlp):
            if desired is not None:
                check_cel(desired)
        return Rendered(auth_policy, trlp)


def compile_generated_cel(cache: Cache) -> Callable[[], Awaitable[None]]:
    """A standby's warm-up (``Manager.add_warm_up``): compile the CEL of the policies the leader generated. A
    render checks every CEL text it builds (compiled once per process, ~10 ms each): after a takeover, the
    first renders would otherwise compile the same texts again before the first change is written."""

    async def warm_up() -> None:
        for gvk in (AUTH_POLICY, TOKEN_RATE_LIMIT_POLICY):
            for obj in cache.list(gvk, labels={names.MANAGED_BY_LABEL: names.MANAGED_BY}):
                with contextlib.suppress(CelError):  # a render reports it
                    check_cel(obj)
                await asyncio.sleep(0)  # the lease watch and the informers go on meanwhile

    return warm_up
