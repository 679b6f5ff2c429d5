"""MaaSSubscription -> one TokenRateLimitPolicy per referenced model, aggregated over all subscriptions.

Each subscription contributes one limit (all of its `{limit, window}` tiers as rates, counted per user and
selected by the subscription identity the AuthPolicy exports); `unlimited` models contribute no rate but stay
metered.

On top of the shared flow: request priority (`inferencePriority` -> InferenceObjectives, see flowcontrol.py)
is synced per wanted model inside `sync_model` and published in the same single status apply
(`flowControlStatuses`, condition `InferenceObjectivesReady`, the Degraded rule); stale objectives are pruned
after the status is written. Deletion waits for the key cleanup Job (cleanup.py) before the finalizer goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maasctl.builders import names
from maasctl.builders.celcheck import check_cel
from maasctl.builders.refs import ObjectRef
from maasctl.builders.status import (
    DEGRADING_REASONS,
    INFERENCE_OBJECTIVES_READY,
    FlowControlReason,
    FlowControlStatus,
    flow_control_status,
    inference_objectives_condition,
    most_severe,
    request_priority_phase,
)
from maasctl.builders.trlp import (
    RateTier,
    SubscriptionLimits,
    TokenRateLimitInput,
    build_token_rate_limit_policy,
    subscription_problems,
)
from maasctl.reconcilers.aggregate import AggregatingReconciler, ModelOutcome, model_index, source_key
from maasctl.reconcilers.cleanup import KeyCleanup
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.flowcontrol import (
    API_RECHECK_SECONDS,
    FlowControl,
    FlowControlRetry,
    FlowRun,
    inference_priority,
)
from maasctl.reconcilers.kinds import MAAS_SUBSCRIPTION, TOKEN_RATE_LIMIT_POLICY
from maasctl.reconcilers.routes import RouteResolution
from maasctl.reconcilers.status import base_status, generated_statuses
from maasctl.runtime import Request, Result, is_deleting, remove_condition, set_condition
from maasctl.runtime.objects import FrozenObject

_MAX_MESSAGE = 1024


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

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.flow = FlowControl(ctx, self.gateway)
        self.cleanup = KeyCleanup(ctx)
        self._runs: dict[str, FlowRun] = {}  # per subscription key, only during its reconcile

    async def reconcile(self, req: Request) -> Result:
        self._runs[req.key] = FlowRun()
        try:
            return await super().reconcile(req)
        finally:
            self._runs.pop(req.key, None)

    async def sync_model(self, parent: FrozenObject, model: ObjectRef) -> ModelOutcome:
        outcome = await super().sync_model(parent, model)
        run = self._runs.get(source_key(parent))
        if run is not None and not is_deleting(parent) and self.in_scope(parent) and \
                model.key in model_index(parent):
            run.entries[model.key] = await self.flow.sync(parent, model, run)
        return outcome

    async def after_sync(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> Result:
        run = self._runs.get(source_key(obj)) or FlowRun()
        await self.flow.prune(obj, run.keep)
        reasons = {e.reason for e in run.entries.values()}
        if FlowControlReason.RECONCILE_FAILED in reasons:
            raise FlowControlRetry(f"request priority of {source_key(obj)} failed; retrying")
        if FlowControlReason.API_UNAVAILABLE in reasons:
            return Result.requeue_after(API_RECHECK_SECONDS)
        return Result.done()

    async def on_deleting(self, obj: FrozenObject) -> Result | None:
        await self.flow.prune(obj, set())
        return await self.cleanup.run(obj)

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

    def flow_entries(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> list[FlowControlStatus]:
        run = self._runs.get(source_key(obj)) or FlowRun()
        return [run.entries.get(o.model.key) or flow_control_status(self.flow.facts(obj, o.model))
                for o in outcomes]

    def status(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
        status = base_status(obj, outcomes) | {
            "tokenRateLimitStatuses": generated_statuses(outcomes, model_field=True)
        }
        entries = self.flow_entries(obj, outcomes)
        priority_set = inference_priority(obj) is not None
        status["flowControlStatuses"] = [e.to_dict() | {"message": e.message[:_MAX_MESSAGE]} for e in entries]
        conditions = status["conditions"]
        generation = status["observedGeneration"]
        phase = request_priority_phase(status["phase"], priority_set, entries)
        if phase != status["phase"]:
            worst = most_severe([e for e in entries if e.reason in DEGRADING_REASONS])
            assert worst is not None
            status["phase"] = phase
            conditions = set_condition(
                conditions, type_="Ready", status="False", reason="RequestPriorityDegraded",
                message=f"access is kept; request priority: {worst.namespace}/{worst.name}: {worst.message}"[:4096],
                observed_generation=generation)
        cond = inference_objectives_condition(priority_set, entries)
        if cond is None:
            conditions = remove_condition(conditions, INFERENCE_OBJECTIVES_READY)
        else:
            conditions = set_condition(conditions, type_=cond.type, status=cond.status, reason=cond.reason,
                                       message=cond.message[:4096], observed_generation=generation)
        status["conditions"] = conditions
        return status
