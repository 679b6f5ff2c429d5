"""Request priority of a MaaSSubscription: one InferenceObjective per (subscription, InferencePool).

The pure decisions (objective name, object, flowControlStatuses reason, condition, phase) live in
`builders.inferenceobjective` and `builders.status`; this module only gathers the facts from the cache and
does the writes. Objectives live in the model's namespace, the subscription in the subscription namespace, so
they are linked with labels (never ownerReferences) and found again through those labels for pruning.

Facts per referenced model (cache reads only):
- ExternalModels, and LLMInferenceServices without a router scheduler, are NotApplicable.
- The pool is `status.router.scheduler.inferencePool` of the LLMInferenceService; it counts as known once that
  InferencePool and the model's HTTPRoute are observed (else PoolPending).
- The API is available while the InferenceObjective informer is synced (the CRD is served); when the CRD is
  missing the informer waits for it, and the subscription is re-checked periodically so it recovers alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from maasctl.builders import names
from maasctl.builders.inferenceobjective import (
    POOL_GROUP,
    POOL_KIND,
    InferenceObjectiveInput,
    build_inference_objective,
    is_objective_ours,
    objective_name,
    subscription_labels,
)
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.status import (
    FlowControlFacts,
    FlowControlReason,
    FlowControlStatus,
    ObservedObjective,
    PoolRef,
    flow_control_status,
)
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.views import SubscriptionView
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.kinds import INFERENCE_OBJECTIVE, INFERENCE_POOL, MAAS_MODEL_REF
from maasctl.reconcilers.routes import (
    MODEL_NOT_FOUND,
    RouteResolution,
    llm_inference_service,
    resolve,
    subscription_gateway_problem,
)
from maasctl.runtime import ApiError, NotFound, is_deleting
from maasctl.runtime.informer import InformerState
from maasctl.runtime.objects import FrozenObject

API_RECHECK_SECONDS = 10.0
"""How often a subscription waiting for the InferenceObjective CRD checks again."""

_WANTS_OBJECTIVE = frozenset({FlowControlReason.OBJECTIVE_PENDING, FlowControlReason.OBJECTIVE_RECONCILED})


class FlowControlRetry(Exception):
    """Raised after the status was written when some objective failed, so the work queue retries with backoff."""


def subscription_ref(sub: SubscriptionView) -> ObjectRef:
    return ObjectRef(sub.namespace, sub.name)


@dataclass
class FlowRun:
    """What one reconcile of one subscription decided: status entries per model and the objectives to keep."""

    entries: dict[str, FlowControlStatus] = field(default_factory=dict)
    keep: set[tuple[str, str]] = field(default_factory=set)
    applied: dict[tuple[str, str], str | None] = field(default_factory=dict)
    """Objectives already applied in this reconcile (several models may share a pool) -> the error, if any."""


def _routing_group_split(llm: Mapping[str, Any]) -> str | None:
    group = ((llm.get("status") or {}).get("router") or {}).get("group") or {}
    active = [m for m in group.get("members") or () if not m.get("stopped") and int(m.get("weight") or 0) > 0]
    if len(active) > 1:
        return f"traffic is split across {len(active)} members of routing group {group.get('name')}"
    return None


class FlowControl:
    def __init__(self, ctx: Context, gateway: GatewayRef) -> None:
        self.ctx = ctx
        self.gateway = gateway

    def api_available(self) -> bool:
        return self.ctx.cache.informer(INFERENCE_OBJECTIVE).state is InformerState.SYNCED

    def facts(self, sub: SubscriptionView, model: ObjectRef) -> FlowControlFacts:
        """Everything the status decision needs for one model, from the cache."""
        cache = self.ctx.cache
        base = FlowControlFacts(model=model, priority=sub.inference_priority, api_available=self.api_available())
        mr = cache.peek(MAAS_MODEL_REF, model.name, model.namespace)
        if mr is None or is_deleting(mr):
            return base
        target = (mr.get("spec") or {}).get("modelRef") or {}
        if target.get("kind") == "ExternalModel":
            return _replace(base, external=True)
        if target.get("kind") != "LLMInferenceService":
            return _replace(base, scheduled=False)
        llm = llm_inference_service(cache, str(target.get("name", "")), model.namespace)
        if llm is None:
            return base
        spec_scheduler = ((llm.get("spec") or {}).get("router") or {}).get("scheduler")
        status_scheduler = ((llm.get("status") or {}).get("router") or {}).get("scheduler")
        if spec_scheduler is None and status_scheduler is None:
            return _replace(base, scheduled=False)
        ref = (status_scheduler or {}).get("inferencePool") or {}
        if not ref.get("name"):
            return base
        if (ref.get("group"), ref.get("kind")) != (POOL_GROUP, POOL_KIND):
            return _replace(base, pool=PoolRef(str(ref["name"]), str(ref.get("group")), str(ref.get("kind"))),
                            unsupported=f"pool kind {ref.get('group')}/{ref.get('kind')} is not supported")
        if ref.get("namespace") and ref["namespace"] != model.namespace:
            return _replace(base, pool=PoolRef(str(ref["name"])),
                            unsupported=f"InferencePool {ref['namespace']}/{ref['name']} is not in the model's "
                            "namespace")
        pool = ObjectRef(model.namespace, str(ref["name"]))
        res = resolve(cache, model, self.gateway, self.ctx.tenant_gateways)
        if cache.peek(INFERENCE_POOL, pool.name, pool.namespace) is None or res.reason in (
            "RouteNotFound", "BackendNotFound", MODEL_NOT_FOUND
        ):
            return base
        name = objective_name(subscription_ref(sub), pool)
        live = cache.peek(INFERENCE_OBJECTIVE, name, pool.namespace) if base.api_available else None
        observed = None
        if live is not None:
            prio = (live.get("spec") or {}).get("priority")
            observed = ObservedObjective(
                ours=is_objective_ours(live, subscription_ref(sub)),
                opted_out=names.is_opted_out(live),
                priority=int(prio) if prio is not None else None,
            )
        return _replace(
            base, pool=PoolRef(pool.name), objective_name=name, on_tenant_gateway=self._on_tenant_gateway(sub, res),
            unsupported=_routing_group_split(llm), observed=observed,
        )

    def _on_tenant_gateway(self, sub: SubscriptionView, res: RouteResolution) -> bool:
        if not res.resolved:
            return res.reason != "NotOnGateway"
        return subscription_gateway_problem(res, sub, self.gateway, self.ctx.gateways) is None

    async def sync(self, obj: FrozenObject, sub: SubscriptionView, model: ObjectRef, run: FlowRun) -> FlowControlStatus:
        """Create or update this subscription's objective for `model`; return its status entry."""
        facts = self.facts(sub, model)
        entry = flow_control_status(facts)
        if facts.objective_name is None:
            return entry
        key = (model.namespace, facts.objective_name)
        if entry.reason in _WANTS_OBJECTIVE:
            assert facts.pool is not None and facts.priority is not None
            run.keep.add(key)
            if key not in run.applied:
                run.applied[key] = await self._apply(obj, sub, model, facts)
            error = run.applied[key]
            if error == "":
                return flow_control_status(_replace(facts, api_available=False))
            return flow_control_status(_replace(self.facts(sub, model), error=error))
        if entry.reason is FlowControlReason.UNMANAGED:
            run.keep.add(key)
        return entry

    async def _apply(self, obj: FrozenObject, sub: SubscriptionView, model: ObjectRef,
                     facts: FlowControlFacts) -> str | None:
        """Apply the objective; the error message on failure, "" when the API vanished, None on success."""
        assert facts.pool is not None and facts.priority is not None
        try:
            desired = build_inference_objective(InferenceObjectiveInput(
                subscription=subscription_ref(sub), pool=ObjectRef(model.namespace, facts.pool.name),
                model=model, priority=facts.priority))
            await self.ctx.apply_generated(obj, desired)
        except NotFound as exc:
            if not await self.ctx.client.mapper.is_served(INFERENCE_OBJECTIVE):
                return ""
            return _short(exc)
        except (ApiError, InvalidInputError) as exc:
            await self.ctx.event(obj, "Warning", "InferenceObjectiveFailed",
                                 f"InferenceObjective {model.namespace}/{facts.objective_name}: {_short(exc)}")
            return _short(exc)
        return None

    async def prune(self, obj: FrozenObject, keep: set[tuple[str, str]]) -> None:
        """Delete this subscription's objectives that are no longer wanted (opted-out ones are left alone)."""
        if not self.api_available():
            return
        ref = ObjectRef(str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
        for obj in self.ctx.cache.list(INFERENCE_OBJECTIVE, labels=subscription_labels(ref)):
            meta = obj["metadata"]
            if (meta["namespace"], meta["name"]) in keep or not is_objective_ours(obj, ref):
                continue
            try:
                await self.ctx.delete_generated(obj, INFERENCE_OBJECTIVE, str(meta["name"]), str(meta["namespace"]))
            except NotFound:
                continue


def _short(exc: BaseException) -> str:
    return str(exc)[:400]


def _replace(facts: FlowControlFacts, **changes: Any) -> FlowControlFacts:
    return replace(facts, **changes)
