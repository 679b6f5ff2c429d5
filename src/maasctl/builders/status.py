"""Request-priority status of a MaaSSubscription, as pure functions of observed facts (seed 000).

- `flow_control_status(facts)`: one `status.flowControlStatuses[]` entry per referenced model, with the
  reason the seed's table defines.
- `inference_objectives_condition(priority_set, entries)`: the `InferenceObjectivesReady` condition, present
  only while `inferencePriority` is set: True when every entry is ready, else False with the most severe reason.
- `request_priority_phase(phase, priority_set, entries)`: request priority never fails a subscription; with
  `inferencePriority` set, ReconcileFailed, ObjectiveConflict, NotOnTenantGateway or Unsupported turn an
  otherwise Active subscription Degraded. Pending states and a missing API leave the phase alone.

Decision order in `flow_control_status` (first match wins), and why:
1. NotApplicable: ExternalModels, or models not served through an inference scheduler: nothing to do.
2. PriorityUnset: no objective is wanted; the objective name is still published when the pool is known.
3. ReconcileFailed: the last attempt failed; it is retried.
4. InferenceObjectiveAPIUnavailable: the llm-d.ai CRD is not installed; recovers when it appears.
5. PoolPending: the InferencePool (or HTTPRoute) has not been observed yet.
6. NotOnTenantGateway / Unsupported: priority cannot be applied on this route.
7. The observed objective: opted out -> Unmanaged; not ours -> ObjectiveConflict; ours with the desired
   priority -> ObjectiveReconciled; missing or another priority -> ObjectivePending.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from maasctl.builders.refs import ObjectRef

__all__ = [
    "DEGRADING_REASONS",
    "INFERENCE_OBJECTIVES_READY",
    "SEVERITY",
    "ConditionSpec",
    "FlowControlFacts",
    "FlowControlReason",
    "FlowControlStatus",
    "ObservedObjective",
    "PoolRef",
    "flow_control_status",
    "inference_objectives_condition",
    "most_severe",
    "request_priority_phase",
]

INFERENCE_OBJECTIVES_READY: Final = "InferenceObjectivesReady"


class FlowControlReason(enum.StrEnum):
    OBJECTIVE_RECONCILED = "ObjectiveReconciled"
    PRIORITY_UNSET = "PriorityUnset"
    NOT_APPLICABLE = "NotApplicable"
    UNMANAGED = "Unmanaged"
    POOL_PENDING = "PoolPending"
    OBJECTIVE_PENDING = "ObjectivePending"
    UNSUPPORTED = "Unsupported"
    NOT_ON_TENANT_GATEWAY = "NotOnTenantGateway"
    OBJECTIVE_CONFLICT = "ObjectiveConflict"
    API_UNAVAILABLE = "InferenceObjectiveAPIUnavailable"
    RECONCILE_FAILED = "ReconcileFailed"


R = FlowControlReason
READY_REASONS: Final = frozenset({R.OBJECTIVE_RECONCILED, R.PRIORITY_UNSET, R.NOT_APPLICABLE, R.UNMANAGED})
DEGRADING_REASONS: Final = frozenset(
    {R.RECONCILE_FAILED, R.OBJECTIVE_CONFLICT, R.NOT_ON_TENANT_GATEWAY, R.UNSUPPORTED}
)
SEVERITY: Final[tuple[FlowControlReason, ...]] = (
    R.RECONCILE_FAILED,
    R.OBJECTIVE_CONFLICT,
    R.NOT_ON_TENANT_GATEWAY,
    R.UNSUPPORTED,
    R.API_UNAVAILABLE,
    R.OBJECTIVE_PENDING,
    R.POOL_PENDING,
    R.UNMANAGED,
    R.OBJECTIVE_RECONCILED,
    R.NOT_APPLICABLE,
    R.PRIORITY_UNSET,
)
"""Most severe first: failures that degrade the subscription, then waiting states, then ready states."""


@dataclass(frozen=True)
class PoolRef:
    """`inferencePool` as published in status (a LocalObjectReference: group, kind, name)."""

    name: str
    group: str = "inference.networking.k8s.io"
    kind: str = "InferencePool"


@dataclass(frozen=True)
class ObservedObjective:
    """The InferenceObjective found under the desired name (see inferenceobjective.is_objective_ours)."""

    ours: bool
    opted_out: bool = False
    priority: int | None = None


@dataclass(frozen=True)
class FlowControlFacts:
    """What the reconciler observed about one referenced model (cache reads only)."""

    model: ObjectRef
    external: bool = False
    scheduled: bool = True
    """Served through an inference scheduler (an LLMInferenceService with a router scheduler)."""
    priority: int | None = None
    """The subscription's `inferencePriority`; None when unset."""
    api_available: bool = True
    pool: PoolRef | None = None
    objective_name: str | None = None
    on_tenant_gateway: bool = True
    unsupported: str | None = None
    """Why priority cannot be applied (e.g. a routing group splits traffic); None when it can."""
    observed: ObservedObjective | None = None
    error: str | None = None
    """The error of the last attempt to reconcile the objective (never secrets)."""


@dataclass(frozen=True)
class FlowControlStatus:
    """One `status.flowControlStatuses[]` entry."""

    name: str
    namespace: str
    inference_pool: PoolRef | None
    objective_name: str | None
    ready: bool
    reason: FlowControlReason
    message: str

    def to_dict(self) -> dict[str, object]:
        """The status entry as the CRD spells it (unset fields omitted)."""
        out: dict[str, object] = {"name": self.name, "namespace": self.namespace}
        if self.inference_pool is not None:
            pool = self.inference_pool
            out["inferencePool"] = {"group": pool.group, "kind": pool.kind, "name": pool.name}
        if self.objective_name is not None:
            out["objectiveName"] = self.objective_name
        out |= {"ready": self.ready, "reason": str(self.reason), "message": self.message}
        return out


@dataclass(frozen=True)
class ConditionSpec:
    """A condition without timestamps (the runtime's conditions helper adds those and observedGeneration)."""

    type: str
    status: str
    reason: str
    message: str


def _decide(f: FlowControlFacts) -> tuple[FlowControlReason, str]:
    if f.external:
        return R.NOT_APPLICABLE, "ExternalModels are not served through an inference scheduler"
    if not f.scheduled:
        return R.NOT_APPLICABLE, "the model is not served through an inference scheduler"
    if f.priority is None:
        return R.PRIORITY_UNSET, "inferencePriority is unset; the scheduler applies priority 0"
    if f.error is not None:
        return R.RECONCILE_FAILED, f"reconciling the InferenceObjective failed: {f.error}; retrying"
    if not f.api_available:
        return R.API_UNAVAILABLE, "the InferenceObjective API (llm-d.ai) is not installed"
    if f.pool is None:
        return R.POOL_PENDING, "waiting for the model's InferencePool and HTTPRoute"
    if not f.on_tenant_gateway:
        return R.NOT_ON_TENANT_GATEWAY, "the model's HTTPRoute is not attached to the subscription's Gateway"
    if f.unsupported is not None:
        return R.UNSUPPORTED, f"request priority cannot be applied: {f.unsupported}"
    obs = f.observed
    if obs is not None and obs.opted_out:
        return R.UNMANAGED, 'the InferenceObjective is annotated opendatahub.io/managed: "false"'
    if obs is not None and not obs.ours:
        return R.OBJECTIVE_CONFLICT, f"another object holds the InferenceObjective name {f.objective_name}"
    if obs is not None and obs.priority == f.priority:
        return R.OBJECTIVE_RECONCILED, f"InferenceObjective has priority {f.priority}"
    return R.OBJECTIVE_PENDING, f"waiting for the InferenceObjective with priority {f.priority}"


def flow_control_status(facts: FlowControlFacts) -> FlowControlStatus:
    """The flowControlStatuses entry for one model (see the module docstring for the order)."""
    reason, message = _decide(facts)
    known_pool = None if reason is R.NOT_APPLICABLE else facts.pool
    return FlowControlStatus(
        name=facts.model.name,
        namespace=facts.model.namespace,
        inference_pool=known_pool,
        objective_name=facts.objective_name if known_pool is not None else None,
        ready=reason in READY_REASONS,
        reason=reason,
        message=message,
    )


def most_severe(entries: Sequence[FlowControlStatus]) -> FlowControlStatus | None:
    """The entry whose reason comes first in SEVERITY (ties: model namespace/name order); None if empty."""
    if not entries:
        return None
    return min(entries, key=lambda e: (SEVERITY.index(e.reason), e.namespace, e.name))


def inference_objectives_condition(
    priority_set: bool, entries: Sequence[FlowControlStatus]
) -> ConditionSpec | None:
    """`InferenceObjectivesReady`, or None (remove the condition) while `inferencePriority` is unset."""
    if not priority_set:
        return None
    not_ready = [e for e in entries if not e.ready]
    if not not_ready:
        return ConditionSpec(INFERENCE_OBJECTIVES_READY, "True", "ObjectivesReady",
                             "request priority is reconciled for every model")
    worst = most_severe(not_ready) or not_ready[0]
    others = len(not_ready) - 1
    suffix = f" (and {others} more model{'s' if others != 1 else ''} not ready)" if others else ""
    return ConditionSpec(
        INFERENCE_OBJECTIVES_READY, "False", str(worst.reason),
        f"{worst.namespace}/{worst.name}: {worst.message}{suffix}",
    )


def request_priority_phase(phase: str, priority_set: bool, entries: Sequence[FlowControlStatus]) -> str:
    """The subscription phase after request priority: Active -> Degraded on a degrading reason, else as is."""
    if priority_set and phase == "Active" and any(e.reason in DEGRADING_REASONS for e in entries):
        return "Degraded"
    return phase
