"""MaaSSubscription -> one TokenRateLimitPolicy per referenced model, aggregated over all subscriptions.

Each subscription contributes one limit (all of its `{limit, window}` tiers as rates, counted per user and
selected by the subscription identity the AuthPolicy exports); `unlimited` models contribute no rate but stay
metered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maasctl.builders import names
from maasctl.builders.celcheck import check_cel
from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import (
    RateTier,
    SubscriptionLimits,
    TokenRateLimitInput,
    build_token_rate_limit_policy,
    subscription_problems,
)
from maasctl.reconcilers.aggregate import AggregatingReconciler, ModelOutcome, source_key
from maasctl.reconcilers.kinds import MAAS_SUBSCRIPTION, TOKEN_RATE_LIMIT_POLICY
from maasctl.reconcilers.routes import RouteResolution
from maasctl.reconcilers.status import base_status, generated_statuses
from maasctl.runtime.objects import FrozenObject


def model_entry(source: Mapping[str, Any], model: ObjectRef) -> Mapping[str, Any] | None:
    for ref in (source.get("spec") or {}).get("modelRefs") or ():
        if ref.get("name") == model.name and ref.get("namespace") == model.namespace:
            return ref  # type: ignore[no-any-return]
    return None


def limits_of(source: Mapping[str, Any], model: ObjectRef) -> SubscriptionLimits:
    entry = model_entry(source, model) or {}
    tiers = tuple(RateTier(int(t["limit"]), str(t["window"])) for t in entry.get("tokenRateLimits") or ())
    return SubscriptionLimits(
        subscription=ObjectRef(*source_key(source).split("/", 1)),
        tiers=tiers,
        unlimited=bool(entry.get("unlimited")),
    )


class SubscriptionReconciler(AggregatingReconciler):
    source = MAAS_SUBSCRIPTION
    generated = TOKEN_RATE_LIMIT_POLICY
    annotation = names.SUBSCRIPTIONS_ANNOTATION

    def generated_name(self, model: ObjectRef) -> str:
        return names.trlp_name(model.name)

    def problems(self, source: FrozenObject, model: ObjectRef) -> list[str]:
        if model_entry(source, model) is None:
            return ["model not in spec.modelRefs"]
        return list(subscription_problems(limits_of(source, model)))

    def render(self, model: ObjectRef, res: RouteResolution, sources: Sequence[FrozenObject]) -> dict[str, Any] | None:
        assert res.route is not None
        policy = build_token_rate_limit_policy(
            TokenRateLimitInput(
                model=model,
                route=res.route,
                subscriptions=tuple(limits_of(s, model) for s in sources),
                gateway=res.gateways[0] if res.gateways else None,
            )
        )
        if policy is not None:
            check_cel(policy)
        return policy

    def status(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
        return base_status(obj, outcomes) | {
            "tokenRateLimitStatuses": generated_statuses(outcomes, model_field=True)
        }
