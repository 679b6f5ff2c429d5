"""MaaSSubscription -> its status, its InferenceObjectives and, on deletion, the key cleanup Job.

The TokenRateLimitPolicy of each model is rendered by the MaaSModelRef reconciler from every subscription
naming the model (`modelpolicies`); this reconciler reports, per model, whether the subscription is found,
valid and present in that policy (`tokenRateLimitStatuses`, the Active/Degraded/Failed phase). The first status
of a generation waits briefly while that policy lacks the subscription's limit (statushold.py).

Request priority (`inferencePriority` -> InferenceObjectives, see flowcontrol.py) is synced per model and
published in the same single status apply (`flowControlStatuses`, condition `InferenceObjectivesReady`, the
Degraded rule); stale objectives are pruned after the status is written. The condition `SpecPriorityDuplicate`
(the reference's) is True (`SharedPriority`) while another subscription of the namespace has the same
`spec.priority`: a caller entitled to both gets `multiple_subscriptions` until it names one. Deletion (the
`finalize` helper) prunes the objectives and waits for the key cleanup Job (cleanup.py) before the finalizer
goes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence, Set
from typing import Any

from maasctl.builders import names
from maasctl.builders.refs import ObjectRef
from maasctl.builders.status import (
    DEGRADING_REASONS,
    INFERENCE_OBJECTIVES_READY,
    FlowControlReason,
    FlowControlStatus,
    inference_objectives_condition,
    most_severe,
    request_priority_phase,
)
from maasctl.builders.trlp import limit_name
from maasctl.contract.views import SubscriptionView
from maasctl.reconcilers.cleanup import KeyCleanup
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, FINALIZER, Context
from maasctl.reconcilers.flowcontrol import API_RECHECK_SECONDS, FlowControl, FlowControlRetry, FlowRun
from maasctl.reconcilers.guardrails import config_ready, current_settings
from maasctl.reconcilers.indexes import PRIORITY_INDEX, kuadrant_ready, model_index
from maasctl.reconcilers.kinds import GUARDRAIL_CONFIG, HTTP_ROUTE, MAAS_SUBSCRIPTION, TOKEN_RATE_LIMIT_POLICY
from maasctl.reconcilers.modelpolicies import subscription_model_problems
from maasctl.reconcilers.routes import MODEL_NOT_FOUND, resolve, subscription_gateway_problem
from maasctl.reconcilers.status import ModelOutcome, base_status, dependency_status, generated_statuses
from maasctl.reconcilers.statushold import LIMIT_NOT_RENDERED, FirstStatusHold
from maasctl.runtime import Request, Result, finalize, is_deleting, remove_condition, set_condition
from maasctl.runtime.objects import FrozenObject

_MAX_MESSAGE = 1024
GUARDRAILS_READY = "GuardrailsReady"


class SubscriptionReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.flow = FlowControl(ctx, ctx.gateway)
        self.cleanup = KeyCleanup(ctx)
        self.hold = FirstStatusHold()

    async def reconcile(self, req: Request) -> Result:
        obj = self.ctx.cache.get(MAAS_SUBSCRIPTION, req.name, req.namespace)
        if obj is None:
            self.hold.forget(req.namespace or "", req.name)
            return Result.done()
        async with self.ctx.announcing(obj):  # the InferenceObjectives written: one Event per verb
            return await finalize(self.ctx.client, obj, FINALIZER, apply=self._apply, cleanup=self._delete)

    async def _delete(self, obj: FrozenObject) -> Result | None:
        self.hold.forget(obj["metadata"]["namespace"], obj["metadata"]["name"])
        await self.flow.prune(obj, set())
        return await self.cleanup.run(obj)

    async def _apply(self, obj: FrozenObject) -> Result:
        ctx = self.ctx
        missing = ctx.missing_apis(TOKEN_RATE_LIMIT_POLICY, HTTP_ROUTE)
        if missing:
            await ctx.write_status(obj, dependency_status(obj, missing))
            return Result.requeue_after(DEPENDENCY_RECHECK)
        view = ctx.views.subscription(obj)
        models = [ObjectRef(*key.split("/", 1)) for key in model_index(obj)]
        outcomes = [self.outcome(obj, view, m) for m in models]
        run = FlowRun()
        if view.problem is None and ctx.in_scope(obj):
            for model in models:
                run.entries[model.key] = await self.flow.sync(obj, view, model, run)
        held = self.hold.remaining(obj, outcomes)
        if held is None:
            await ctx.write_status(obj, self.status(obj, view, outcomes, run))
            self.hold.forget(view.namespace, view.name)
            await self.flow.prune(obj, run.keep)
        reasons = {e.reason for e in run.entries.values()}
        if FlowControlReason.RECONCILE_FAILED in reasons:
            raise FlowControlRetry(f"request priority of {view.key} failed; retrying")
        if FlowControlReason.API_UNAVAILABLE in reasons:
            return Result.requeue_after(API_RECHECK_SECONDS if held is None else min(held, API_RECHECK_SECONDS))
        return Result.done() if held is None else Result.requeue_after(held)  # the policy's update comes sooner

    def outcome(self, obj: FrozenObject, view: SubscriptionView, model: ObjectRef) -> ModelOutcome:
        if not self.ctx.in_scope(obj):
            return ModelOutcome(model, False, "Invalid",
                                f"MaaSSubscriptions count only in namespace {self.ctx.settings.subscription_namespace}")
        ctx = self.ctx
        res = resolve(ctx.cache, model, ctx.gateway, ctx.tenant_gateways)
        if not res.resolved:
            return ModelOutcome(model, res.reason != MODEL_NOT_FOUND, res.reason, res.message)
        off_gateway = subscription_gateway_problem(res, view, ctx.gateway, ctx.gateways)
        if off_gateway is not None:
            return ModelOutcome(model, True, FlowControlReason.NOT_ON_TENANT_GATEWAY.value, off_gateway)
        name = names.trlp_name(model.name)
        generated = ObjectRef(model.namespace, name)
        live = self.ctx.cache.peek(TOKEN_RATE_LIMIT_POLICY, name, model.namespace)
        problems = subscription_model_problems(view, model)
        if problems:
            return ModelOutcome(model, True, "Invalid", "; ".join(problems), generated, False,
                                kuadrant_ready(live)[1])
        ready, reason = kuadrant_ready(live)
        if live is not None and limit_name(ObjectRef(view.namespace, view.name), model) not in _limits(live):
            ready, reason = False, LIMIT_NOT_RENDERED
        return ModelOutcome(model, True, "Valid", res.message, generated, ready, reason)

    def status(self, obj: FrozenObject, view: SubscriptionView, outcomes: Sequence[ModelOutcome],
               run: FlowRun) -> dict[str, Any]:
        status = base_status(obj, outcomes) | {
            "tokenRateLimitStatuses": generated_statuses(outcomes, model_field=True)
        }
        entries: list[FlowControlStatus] = [e for o in outcomes if (e := run.entries.get(o.model.key)) is not None]
        priority_set = view.inference_priority is not None
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
        conditions = self.guardrails_condition(view, conditions, generation)
        peers = same_priority_peers(self.ctx, obj)
        cond_status, reason, message = priority_duplicate_condition(view.priority, peers)
        conditions = set_condition(conditions, type_=SPEC_PRIORITY_DUPLICATE, status=cond_status, reason=reason,
                                   message=message, observed_generation=generation)
        status["conditions"] = conditions
        return status

    def guardrails_condition(self, view: SubscriptionView, conditions: list[dict[str, Any]],
                             generation: int) -> list[dict[str, Any]]:
        """`GuardrailsReady`: present while a model enables guardrails; False names every model whose
        configuration is missing or invalid (those requests are refused), or says the global switch is off."""
        guarded = [(m.key, m.guardrails) for m in view.models if m.guardrails]
        if not guarded:
            return remove_condition(conditions, GUARDRAILS_READY)
        ns = self.ctx.settings.subscription_namespace
        settings = current_settings(self.ctx)
        missing = [f"{model} -> {config}" for model, config in guarded
                   if self.ctx.cache.get(GUARDRAIL_CONFIG, config, ns) is None]
        invalid = [f"{model} -> {config}" for model, config in guarded
                   if f"{model} -> {config}" not in missing
                   and not config_ready(self.ctx.cache.get(GUARDRAIL_CONFIG, config, ns))]
        if missing:
            status, reason = "False", "GuardrailConfigNotFound"
            message = f"GuardrailConfig not found (requests to these models are refused): {', '.join(missing)}"
            if invalid:
                message += f"; not ready: {', '.join(invalid)}"
        elif invalid:
            status, reason = "False", "GuardrailConfigNotReady"
            message = f"GuardrailConfig not valid or not checked yet (requests are refused): {', '.join(invalid)}"
        elif not settings.active:
            status, reason = "False", "GuardrailsDisabled"
            message = "guardrails are disabled globally (GuardrailsSettings): these settings have no effect"
        else:
            status, reason = "True", "GuardrailsEnforced"
            message = f"guarded models: {', '.join(f'{m} -> {c}' for m, c in guarded)}"
        return set_condition(conditions, type_=GUARDRAILS_READY, status=status, reason=reason,
                             message=message[:4096], observed_generation=generation)


SPEC_PRIORITY_DUPLICATE = "SpecPriorityDuplicate"
PEERS_NAMED = 5
"""Peers named in `SpecPriorityDuplicate`; beyond that the message is constant, so a subscription joining a
large group of equal priorities rewrites no other subscription's status (one write per change, not N)."""


def priority_duplicate_condition(priority: int, peers: Sequence[str]) -> tuple[str, str, str]:
    """(status, reason, message) of `SpecPriorityDuplicate` from the other live subscriptions sharing the
    priority (`peers`, sorted; only the first PEERS_NAMED + 1 matter)."""
    if not peers:
        return "False", "NoDuplicatePeers", "no other subscription has this priority"
    listed = ", ".join(peers) if len(peers) <= PEERS_NAMED else f"more than {PEERS_NAMED} other subscriptions"
    return ("True", "SharedPriority",
            f"priority {priority} is shared with {listed}; callers entitled to several of them must choose one "
            "(X-MaaS-Subscription, or subscription when minting a key)"[:4096])


def spec_priority(obj: FrozenObject) -> int:
    """`spec.priority` (0 when unset or not an integer)."""
    value = (obj.get("spec") or {}).get("priority", 0)
    return value if isinstance(value, int) else 0


def priority_index(obj: FrozenObject) -> list[str]:
    """Index function: `<namespace>/<spec.priority>` of a live MaaSSubscription (its group of equal priorities;
    a subscription being deleted is in no group)."""
    if is_deleting(obj):
        return []
    return [f"{obj['metadata']['namespace']}/{spec_priority(obj)}"]


def priority_group(ctx: Context, namespace: str, priority: int) -> Set[str]:
    """`namespace/name` keys of the live subscriptions of `namespace` with `priority` (a live view of the index:
    reading its size or a few names costs nothing however large the group)."""
    return ctx.cache.index_keys(MAAS_SUBSCRIPTION, PRIORITY_INDEX, f"{namespace}/{priority}")


def same_priority_peers(ctx: Context, obj: FrozenObject) -> list[str]:
    """Names of the other live subscriptions in `obj`'s namespace with the same priority, sorted, when there are
    at most PEERS_NAMED of them; else PEERS_NAMED + 1 of them in no particular order (the condition then says
    only "more than PEERS_NAMED"), so a reconcile in a large group of equal priorities does not sort it."""
    namespace = obj["metadata"]["namespace"]
    me = f"{namespace}/{obj['metadata']['name']}"
    group = priority_group(ctx, namespace, spec_priority(obj))
    others = (key for key in group if key != me)
    if len(group) - (me in group) > PEERS_NAMED:
        return [key.split("/", 1)[1] for key in itertools.islice(others, PEERS_NAMED + 1)]
    return sorted(key.split("/", 1)[1] for key in others)


def _limits(trlp: FrozenObject) -> set[str]:
    spec = trlp.get("spec") or {}
    block = spec.get("defaults") or spec.get("overrides") or spec
    return set((block.get("limits") or {}).keys())
