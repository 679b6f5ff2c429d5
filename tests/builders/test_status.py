"""Request-priority status: every flowControlStatuses reason, the condition and the phase rule (seed 000)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.builders.refs import ObjectRef
from maasctl.builders.status import (
    DEGRADING_REASONS,
    SEVERITY,
    ConditionSpec,
    FlowControlFacts,
    FlowControlReason,
    FlowControlStatus,
    ObservedObjective,
    PoolRef,
    flow_control_status,
    inference_objectives_condition,
    most_severe,
    request_priority_phase,
)

R = FlowControlReason
MODEL = ObjectRef("llm", "granite")
POOL = PoolRef("granite-inference-pool")
READY_FACTS = FlowControlFacts(
    model=MODEL, priority=10, pool=POOL, objective_name="maas-premium-abc",
    observed=ObservedObjective(ours=True, priority=10),
)


@pytest.mark.parametrize(
    ("facts", "reason", "ready"),
    [
        pytest.param(READY_FACTS, R.OBJECTIVE_RECONCILED, True, id="reconciled"),
        pytest.param(replace(READY_FACTS, priority=0, observed=ObservedObjective(ours=True, priority=0)),
                     R.OBJECTIVE_RECONCILED, True, id="explicit-zero"),
        pytest.param(replace(READY_FACTS, priority=None), R.PRIORITY_UNSET, True, id="priority-unset"),
        pytest.param(replace(READY_FACTS, external=True), R.NOT_APPLICABLE, True, id="external-model"),
        pytest.param(replace(READY_FACTS, scheduled=False), R.NOT_APPLICABLE, True, id="no-scheduler"),
        pytest.param(replace(READY_FACTS, observed=ObservedObjective(ours=True, opted_out=True, priority=3)),
                     R.UNMANAGED, True, id="unmanaged"),
        pytest.param(replace(READY_FACTS, observed=ObservedObjective(ours=False, opted_out=True)),
                     R.UNMANAGED, True, id="foreign-but-opted-out"),
        pytest.param(replace(READY_FACTS, pool=None, objective_name=None), R.POOL_PENDING, False, id="pool-pending"),
        pytest.param(replace(READY_FACTS, observed=None), R.OBJECTIVE_PENDING, False, id="objective-missing"),
        pytest.param(replace(READY_FACTS, observed=ObservedObjective(ours=True, priority=1)), R.OBJECTIVE_PENDING,
                     False, id="objective-old-priority"),
        pytest.param(replace(READY_FACTS, unsupported="traffic is split across a routing group"), R.UNSUPPORTED,
                     False, id="unsupported"),
        pytest.param(replace(READY_FACTS, on_tenant_gateway=False), R.NOT_ON_TENANT_GATEWAY, False,
                     id="not-on-tenant-gateway"),
        pytest.param(replace(READY_FACTS, observed=ObservedObjective(ours=False, priority=10)), R.OBJECTIVE_CONFLICT,
                     False, id="conflict"),
        pytest.param(replace(READY_FACTS, api_available=False), R.API_UNAVAILABLE, False, id="api-unavailable"),
        pytest.param(replace(READY_FACTS, error="conflict on update"), R.RECONCILE_FAILED, False,
                     id="reconcile-failed"),
        pytest.param(replace(READY_FACTS, external=True, error="x"), R.NOT_APPLICABLE, True,
                     id="external-wins-over-error"),
        pytest.param(replace(READY_FACTS, priority=None, api_available=False), R.PRIORITY_UNSET, True,
                     id="unset-needs-no-api"),
    ],
)
def test_reasons(facts: FlowControlFacts, reason: FlowControlReason, ready: bool) -> None:
    entry = flow_control_status(facts)
    assert (entry.reason, entry.ready) == (reason, ready)
    assert entry.message
    assert (entry.name, entry.namespace) == ("granite", "llm")


def test_objective_name_published_when_pool_known_even_if_priority_unset() -> None:
    entry = flow_control_status(replace(READY_FACTS, priority=None))
    assert entry.to_dict() == {
        "name": "granite",
        "namespace": "llm",
        "inferencePool": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                          "name": "granite-inference-pool"},
        "objectiveName": "maas-premium-abc",
        "ready": True,
        "reason": "PriorityUnset",
        "message": "inferencePriority is unset; the scheduler applies priority 0",
    }


def test_external_model_has_no_pool_or_objective() -> None:
    entry = flow_control_status(replace(READY_FACTS, external=True))
    assert entry.to_dict().keys() == {"name", "namespace", "ready", "reason", "message"}


def test_every_reason_is_ranked_once() -> None:
    assert sorted(SEVERITY) == sorted(FlowControlReason)
    assert len(set(SEVERITY)) == len(SEVERITY)
    assert set(SEVERITY[: len(DEGRADING_REASONS)]) == DEGRADING_REASONS


def entry(reason: FlowControlReason, name: str = "m", ready: bool = False) -> FlowControlStatus:
    return FlowControlStatus(name, "llm", None, None, ready, reason, f"{reason} message")


@pytest.mark.parametrize(
    ("priority_set", "entries", "expected"),
    [
        pytest.param(False, [entry(R.RECONCILE_FAILED)], None, id="unset-removes-condition"),
        pytest.param(True, [], ConditionSpec("InferenceObjectivesReady", "True", "ObjectivesReady",
                                             "request priority is reconciled for every model"), id="no-models"),
        pytest.param(True, [entry(R.OBJECTIVE_RECONCILED, ready=True), entry(R.NOT_APPLICABLE, "e", ready=True)],
                     ConditionSpec("InferenceObjectivesReady", "True", "ObjectivesReady",
                                   "request priority is reconciled for every model"), id="all-ready"),
        pytest.param(True, [entry(R.POOL_PENDING, "a"), entry(R.OBJECTIVE_CONFLICT, "b"),
                            entry(R.OBJECTIVE_RECONCILED, "c", ready=True)],
                     ConditionSpec("InferenceObjectivesReady", "False", "ObjectiveConflict",
                                   "llm/b: ObjectiveConflict message (and 1 more model not ready)"),
                     id="most-severe-wins"),
        pytest.param(True, [entry(R.POOL_PENDING, "a"), entry(R.POOL_PENDING, "b"), entry(R.POOL_PENDING, "c")],
                     ConditionSpec("InferenceObjectivesReady", "False", "PoolPending",
                                   "llm/a: PoolPending message (and 2 more models not ready)"),
                     id="ties-by-name"),
    ],
)
def test_condition(priority_set: bool, entries: list[FlowControlStatus], expected: ConditionSpec | None) -> None:
    assert inference_objectives_condition(priority_set, entries) == expected


@pytest.mark.parametrize(
    ("phase", "priority_set", "reason", "expected"),
    [
        pytest.param("Active", True, R.RECONCILE_FAILED, "Degraded", id="failed-degrades"),
        pytest.param("Active", True, R.OBJECTIVE_CONFLICT, "Degraded", id="conflict-degrades"),
        pytest.param("Active", True, R.NOT_ON_TENANT_GATEWAY, "Degraded", id="gateway-degrades"),
        pytest.param("Active", True, R.UNSUPPORTED, "Degraded", id="unsupported-degrades"),
        pytest.param("Active", True, R.POOL_PENDING, "Active", id="pending-keeps-phase"),
        pytest.param("Active", True, R.OBJECTIVE_PENDING, "Active", id="objective-pending-keeps-phase"),
        pytest.param("Active", True, R.API_UNAVAILABLE, "Active", id="missing-api-keeps-phase"),
        pytest.param("Active", False, R.RECONCILE_FAILED, "Active", id="unset-never-degrades"),
        pytest.param("Failed", True, R.RECONCILE_FAILED, "Failed", id="never-improves-failed"),
        pytest.param("Pending", True, R.OBJECTIVE_CONFLICT, "Pending", id="only-active-is-degraded"),
    ],
)
def test_phase(phase: str, priority_set: bool, reason: FlowControlReason, expected: str) -> None:
    assert request_priority_phase(phase, priority_set, [entry(R.OBJECTIVE_RECONCILED, "ok", True),
                                                        entry(reason)]) == expected


@given(st.lists(st.sampled_from(list(FlowControlReason)), min_size=1, max_size=6))
def test_most_severe_is_the_first_in_severity_order(reasons: list[FlowControlReason]) -> None:
    entries = [entry(r, f"m{i}") for i, r in enumerate(reasons)]
    worst = most_severe(entries)
    assert worst is not None
    assert worst.reason == min(reasons, key=SEVERITY.index)
    assert most_severe([]) is None
