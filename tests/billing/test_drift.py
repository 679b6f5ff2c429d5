"""Drift detection: edits to what the compiler sets, and entries added to meaningful maps, are drift; values the
API server adds by default are not."""

from __future__ import annotations

import copy
from typing import Any

from maasctl.billing.rules.drift import differences, removal_patch

DESIRED: dict[str, Any] = {
    "apiVersion": "kuadrant.io/v1", "kind": "RateLimitPolicy",
    "metadata": {"name": "p", "namespace": "n", "labels": {"app.kubernetes.io/managed-by": "billing-controller"}},
    "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
             "overrides": {"strategy": "merge", "limits": {"l": {"rates": [{"limit": 5, "window": "1m"}]}}}},
}


def live(**spec_changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(DESIRED)
    obj["metadata"]["resourceVersion"] = "7"
    obj["spec"]["targetRef"]["sectionName"] = "http"  # something the server or a default could add
    obj["spec"]["overrides"].update(spec_changes)
    return obj


def test_identical_or_defaulted_objects_have_no_drift() -> None:
    assert differences(copy.deepcopy(DESIRED), DESIRED) == []
    assert differences(live(), DESIRED) == []
    assert removal_patch(live(), DESIRED) is None


def test_changed_values_and_added_entries_are_drift() -> None:
    edited = live(limits={"l": {"rates": [{"limit": 500, "window": "1m"}]}, "extra": {"rates": []}})
    assert differences(edited, DESIRED) == ["spec.overrides.limits.l.rates changed",
                                            "spec.overrides.limits.extra added"]
    assert removal_patch(edited, DESIRED) == {"spec": {"overrides": {"limits": {"extra": None}}}}
    relabelled = live()
    relabelled["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    assert differences(relabelled, DESIRED) == ["metadata.labels.app.kubernetes.io/managed-by changed"]


def test_a_removed_field_is_drift() -> None:
    gone = live()
    del gone["spec"]["overrides"]["strategy"]
    assert differences(gone, DESIRED) == ["spec.overrides.strategy removed"]
