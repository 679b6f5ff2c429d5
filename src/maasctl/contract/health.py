"""The Active / Degraded / Failed rule of MaaSAuthPolicies and MaaSSubscriptions, and what it means.

The controller writes the phase; maas-api and the gateway read it (`views.UNUSABLE_PHASES`): Failed and
Invalid subscriptions get no keys and serve no requests, Degraded ones keep access.

- Active: every referenced model contributes (found, routed, valid for this object).
- Degraded: some do, some do not (the others are named in the message). Request priority problems also
  degrade an otherwise Active subscription (seed 000), never fail it.
- Pending: none contributes yet, but nothing is wrong either: the models are still being routed (a freshly
  published model whose route is not there yet). Pending objects keep access (keys can be minted).
- Failed: none contributes and at least one has a real problem (or the list is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["ACTIVE", "DEGRADED", "FAILED", "PENDING", "ModelHealth", "phase_of"]

ACTIVE: Final = "Active"
DEGRADED: Final = "Degraded"
FAILED: Final = "Failed"
PENDING: Final = "Pending"


@dataclass(frozen=True)
class ModelHealth:
    """One referenced model as the phase rule sees it."""

    model: str  # namespace/name
    ok: bool
    message: str = ""
    pending: bool = False  # not ok yet, but only because it is still being set up


def phase_of(models: Sequence[ModelHealth]) -> tuple[str, str, str]:
    """(phase, Ready reason, message)."""
    bad = [m for m in models if not m.ok]
    detail = "; ".join(f"{m.model}: {m.message}" for m in bad)
    if not models:
        return FAILED, "NoValidModels", "no models"
    if len(bad) == len(models):
        if all(m.pending for m in bad):
            return PENDING, "ModelsPending", detail
        return FAILED, "NoValidModels", detail
    if bad:
        return DEGRADED, "PartialFailure", detail
    return ACTIVE, "Reconciled", f"{len(models)} model(s) reconciled"
