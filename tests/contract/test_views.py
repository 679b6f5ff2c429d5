"""Typed views: parsed from the API types, tolerant of invalid objects, cached per resourceVersion."""

from __future__ import annotations

from typing import Any

from maasctl.contract.views import (
    SubscribedModel,
    Tier,
    Views,
    auth_policy_view,
    entitled,
    model_ref_view,
    subscription_view,
)
from maasctl.runtime.objects import freeze

NS = "models-as-a-service"


def subscription_obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "maas.opendatahub.io/v1alpha1",
        "kind": "MaaSSubscription",
        "metadata": {"name": "s1", "namespace": NS, "uid": "u-1", "resourceVersion": "7",
                     "annotations": {"openshift.io/display-name": "Gold"}},
        "spec": {
            "owner": {"groups": [{"name": "g1"}], "users": ["u1"]},
            "priority": 3,
            "modelRefs": [{"name": "m", "namespace": "llm", "tokenRateLimits": [{"limit": 5, "window": "1m"}],
                           "billingRate": {"perToken": "0.01"}},
                          {"name": "u", "namespace": "llm", "unlimited": True}],
            "tokenMetadata": {"organizationId": "legacy-org", "costCenter": "cc", "labels": {"tier": "gold"}},
            **spec,
        },
        "status": {"phase": "Active", "somethingAnOlderVersionWrote": True},
    }


def test_subscription_view_reads_every_field() -> None:
    s = subscription_view(freeze(subscription_obj(inferencePriority=-2)))
    assert (s.key, s.users, s.groups, s.priority, s.phase) == (f"{NS}/s1", {"u1"}, {"g1"}, 3, "Active")
    assert s.models == (SubscribedModel("llm", "m", (Tier(5, "1m"),), False, "0.01"),
                        SubscribedModel("llm", "u", (), True, None))
    assert s.inference_priority == -2 and s.display_name == "Gold"
    assert s.organization_id == "legacy-org" and s.cost_center == "cc" and s.label_map == {"tier": "gold"}
    assert s.usable and s.problem is None and s.includes("llm/u") and not s.includes("llm/x")


def test_organization_id_wins_over_the_legacy_field() -> None:
    assert subscription_view(subscription_obj(organization={"id": "org-1"})).organization_id == "org-1"


def test_invalid_and_deleting_subscriptions_are_not_usable() -> None:
    broken = subscription_obj()
    broken["spec"]["modelRefs"][0]["tokenRateLimits"][0]["window"] = "1d"
    view = subscription_view(broken)
    assert view.problem is not None and "window" in view.problem and not view.usable
    assert view.key == f"{NS}/s1" and view.models == ()
    gone = subscription_obj()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert subscription_view(gone).deleting and not subscription_view(gone).usable
    failed = subscription_obj()
    failed["status"]["phase"] = "Failed"
    assert not subscription_view(failed).usable


def test_entitlement() -> None:
    assert entitled(frozenset({"alice"}), frozenset(), "alice", [])
    assert entitled(frozenset(), frozenset({"team"}), "zed", ["team"])
    assert not entitled(frozenset(), frozenset({"team"}), "zed", ["other"])
    assert entitled(frozenset({"*"}), frozenset(), "anyone", [])
    assert entitled(frozenset(), frozenset({"*"}), "anyone", [])
    assert not entitled(frozenset({"*"}), frozenset(), "", [])


def test_model_ref_and_auth_policy_views() -> None:
    m = model_ref_view({
        "metadata": {"name": "g", "namespace": "llm", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"modelRef": {"kind": "LLMInferenceService", "name": "g"}},
        "status": {"phase": "Ready", "endpoint": "https://gw/llm/g", "resolvedModelAlias": "granite"},
    })
    assert (m.key, m.model_id, m.kind, m.target, m.ready, m.created) == (
        "llm/g", "granite", "LLMInferenceService", "g", True, 1767225600)
    assert model_ref_view({"metadata": {"name": "x", "namespace": "n"}}).problem is not None
    p = auth_policy_view({
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"modelRefs": [{"name": "g", "namespace": "llm"}], "subjects": {"groups": [{"name": "team"}]}},
    })
    assert p.models == ("llm/g",) and p.grants and p.entitles("x", ["team"]) and not p.entitles("x", [])
    assert not auth_policy_view({"metadata": {"name": "p", "namespace": NS}, "spec": {}}).grants


def test_views_parse_once_per_resource_version() -> None:
    views = Views()
    obj = freeze(subscription_obj())
    first = views.subscription(obj)
    assert views.subscription(obj) is first
    changed = subscription_obj(priority=9)
    changed["metadata"]["resourceVersion"] = "8"
    second = views.subscription(freeze(changed))
    assert second is not first and second.priority == 9
