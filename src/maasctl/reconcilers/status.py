"""Status of MaaSAuthPolicies and MaaSSubscriptions: a pure function of what the cache shows per model.

Each referenced model gets a `ModelOutcome` (found? routed? valid for this object? is the generated policy
there and enforced?); `contract.health.phase_of` turns them into the phase. The objects only report: the
MaaSModelRef reconciler is the one writer of the generated policies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maasctl.builders.refs import ObjectRef
from maasctl.contract.health import ModelHealth, phase_of
from maasctl.runtime import set_condition


@dataclass(frozen=True)
class ModelOutcome:
    """One referenced model, for the source's status."""

    model: ObjectRef
    found: bool
    reason: str  # Valid | Invalid | NotFound | RouteNotFound | ... (RouteResolution reasons)
    message: str
    generated: ObjectRef | None = None
    generated_ready: bool = False
    generated_reason: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == "Valid"

    @property
    def pending(self) -> bool:
        """Not contributing yet only because the model's route is still being created."""
        return self.reason == "RouteNotFound"


def model_ref_statuses(outcomes: Sequence[ModelOutcome]) -> list[dict[str, Any]]:
    return [
        {"name": o.model.name, "namespace": o.model.namespace, "ready": o.ok,
         "reason": o.reason, "message": o.message[:1024]}
        for o in outcomes
    ]


def base_status(obj: Mapping[str, Any], outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
    phase, reason, message = phase_of([ModelHealth(o.model.key, o.ok, o.message, o.pending) for o in outcomes])
    generation = int(obj["metadata"].get("generation", 0))
    return {
        "phase": phase,
        "observedGeneration": generation,
        "conditions": set_condition(
            (obj.get("status") or {}).get("conditions"), type_="Ready",
            status="True" if phase == "Active" else "False",
            reason=reason, message=message[:4096], observed_generation=generation,
        ),
        "modelRefStatuses": model_ref_statuses(outcomes),
    }


def dependency_status(obj: Mapping[str, Any], missing: list[str]) -> dict[str, Any]:
    generation = int(obj["metadata"].get("generation", 0))
    message = f"required API not installed: {', '.join(missing)}; waiting for it"
    return {
        "phase": "Pending",
        "observedGeneration": generation,
        "conditions": set_condition((obj.get("status") or {}).get("conditions"), type_="Ready", status="False",
                                    reason="DependencyMissing", message=message, observed_generation=generation),
    }


def generated_statuses(outcomes: Sequence[ModelOutcome], model_field: bool) -> list[dict[str, Any]]:
    out = []
    for o in outcomes:
        if o.generated is None:
            continue
        entry: dict[str, Any] = {"name": o.generated.name, "namespace": o.generated.namespace,
                                 "ready": o.generated_ready, "reason": o.generated_reason}
        if model_field:
            entry |= {"model": o.model.name, "modelNamespace": o.model.namespace}
        out.append(entry)
    return out
