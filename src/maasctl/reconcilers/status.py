"""Pure status shaping shared by the MaaSAuthPolicy and MaaSSubscription reconcilers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maasctl.api import PolicyPhase
from maasctl.reconcilers.aggregate import ModelOutcome
from maasctl.runtime import set_condition


def model_ref_statuses(outcomes: Sequence[ModelOutcome]) -> list[dict[str, Any]]:
    return [
        {"name": o.model.name, "namespace": o.model.namespace, "ready": o.reason == "Valid",
         "reason": o.reason, "message": o.message[:1024]}
        for o in outcomes
    ]


def phase_of(outcomes: Sequence[ModelOutcome]) -> tuple[PolicyPhase, str, str]:
    """Active when every model contributes, Failed when none does, Degraded in between."""
    bad = [o for o in outcomes if o.reason != "Valid"]
    if not outcomes or len(bad) == len(outcomes):
        detail = "; ".join(f"{o.model.key}: {o.message}" for o in bad) or "no models"
        return PolicyPhase.FAILED, "NoValidModels", detail
    if bad:
        return PolicyPhase.DEGRADED, "PartialFailure", "; ".join(f"{o.model.key}: {o.message}" for o in bad)
    return PolicyPhase.ACTIVE, "Reconciled", f"{len(outcomes)} model(s) reconciled"


def base_status(obj: Mapping[str, Any], outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
    phase, reason, message = phase_of(outcomes)
    generation = int(obj["metadata"].get("generation", 0))
    return {
        "phase": str(phase),
        "observedGeneration": generation,
        "conditions": set_condition(
            (obj.get("status") or {}).get("conditions"), type_="Ready",
            status="True" if phase == PolicyPhase.ACTIVE else "False",
            reason=reason, message=message[:4096], observed_generation=generation,
        ),
        "modelRefStatuses": model_ref_statuses(outcomes),
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
