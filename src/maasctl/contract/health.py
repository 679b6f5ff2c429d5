"""The Active / Degraded / Failed rule of MaaSAuthPolicies and MaaSSubscriptions, and what it means.

The controller writes the phase; maas-api and the gateway read it (`views.UNUSABLE_PHASES`): Failed and
Invalid subscriptions get no keys and serve no requests, Degraded ones keep access.

- Active: every referenced model contributes (found, routed, valid for this object).
- Degraded: some do, some do not (the others are named in the message). Request priority problems also
  degrade an otherwise Active subscription (seed 000), never fail it.
- Failed: none does (or the list is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["ACTIVE", "DEGRADED", "FAILED", "ModelHealth", "phase_of"]

ACTIVE: Final = "Active"
DEGRADED: Final = "Degraded"
FAILED: Final = "Failed"


@dataclass(frozen=True)
class ModelHealth:
    """One referenced model as the phase rule sees it."""

    model: str  # namespace/name
    ok: bool
    message: str = ""


def phase_of(models: Sequence[ModelHealth]) -> tuple[str, str, str]:
    """(phase, Ready reason, message)."""
    bad = [m for m in models if not m.ok]
    detail = "; ".join(f"{m.model}: {m.message}" for m in bad)
    if not models or len(bad) == len(models):
        return FAILED, "NoValidModels", detail or "no models"
    if bad:
        return DEGRADED, "PartialFailure", detail
    return ACTIVE, "Reconciled", f"{len(models)} model(s) reconciled"
