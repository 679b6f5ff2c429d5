"""Unit tests of the MaaS API models: seeds parse, each admission rule also holds in Python."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from maasctl.api import (
    HTTPRoute,
    KubeObject,
    LLMInferenceService,
    MaaSAuthPolicy,
    MaaSModelRef,
    MaaSSubscription,
    ModelKind,
    SubscriptionPhase,
    dump,
    has_unsafe_chars,
    parse,
)
from maasctl.api.crdgen import KINDS

from . import examples

KIND_BY_NAME: dict[str, type[KubeObject]] = {k.__name__: k for k in KINDS}


def sub_with(**spec_changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(examples.SEED_001_SUBSCRIPTION)
    obj["spec"].update(spec_changes)
    return obj


def with_limits(*limits: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(examples.SEED_001_SUBSCRIPTION)
    obj["spec"]["modelRefs"][0]["tokenRateLimits"] = list(limits)
    return obj


@pytest.mark.parametrize("name", sorted(examples.ALL))
def test_every_seed_example_parses_and_round_trips(name: str) -> None:
    obj = examples.example(name)
    model = parse(KIND_BY_NAME[obj["kind"]], obj)
    assert dump(model) == with_defaults(obj)
    assert parse(type(model), dump(model)) == model


def with_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server stores it: schema defaults filled in."""
    out = copy.deepcopy(obj)
    if out["kind"] == "MaaSSubscription":
        out["spec"].setdefault("priority", 0)
    if out["kind"] == "ExternalModel":
        for provider in (out["spec"], *out["spec"].get("fallbacks", ())):
            if "credentialRef" in provider:
                provider["credentialRef"].setdefault("key", "api-key")
    return out


def test_typed_access_uses_snake_case_and_enums() -> None:
    sub = parse(MaaSSubscription, examples.SEED_000_PREMIUM_SUBSCRIPTION)
    assert sub.spec.model_refs[0].token_rate_limits is not None
    assert sub.spec.model_refs[0].token_rate_limits[0].window == "1m"
    assert sub.spec.organization is not None and sub.spec.organization.id == "acme-corp"
    ref = parse(MaaSModelRef, examples.SEED_001_MODEL_REF)
    assert ref.spec.model_ref.kind is ModelKind.LLM_INFERENCE_SERVICE
    status = parse(MaaSSubscription, {**examples.SEED_001_SUBSCRIPTION, "status": {"phase": "Active"}}).status
    assert status is not None and status.phase is SubscriptionPhase.ACTIVE
    status = parse(MaaSSubscription, {**examples.SEED_001_SUBSCRIPTION, "status": {"phase": "Terminating"}}).status
    assert status is not None and status.phase is SubscriptionPhase.TERMINATING


@pytest.mark.parametrize("window", ["1s", "1m", "24h", "9999h", "10m", "600s"])
def test_window_accepts_1_to_9999_seconds_minutes_hours(window: str) -> None:
    parse(MaaSSubscription, with_limits({"limit": 10, "window": window}))


@pytest.mark.parametrize("window", ["1d", "0m", "10000s", "1.5h", "90", "", "01m", "1 m", "1M", "1h30m", "\u0661m"])
def test_window_rejects_days_zero_fractions_and_bare_numbers(window: str) -> None:
    with pytest.raises(ValidationError, match="use hours instead"):
        parse(MaaSSubscription, with_limits({"limit": 10, "window": window}))


@pytest.mark.parametrize(("limit", "ok"), [(0, False), (-5, False), (1, True), (10**12, True), (10**12 + 1, False)])
def test_limit_is_at_least_one_and_bounded(limit: int, ok: bool) -> None:
    obj = with_limits({"limit": limit, "window": "1m"})
    if ok:
        parse(MaaSSubscription, obj)
    else:
        with pytest.raises(ValidationError, match="limit"):
            parse(MaaSSubscription, obj)


@pytest.mark.parametrize(
    ("entry", "ok"),
    [
        ({"tokenRateLimits": [{"limit": 1, "window": "1m"}]}, True),
        ({"unlimited": True}, True),
        ({"tokenRateLimits": [{"limit": 1, "window": "1m"}], "unlimited": False}, True),
        ({}, False),
        ({"unlimited": False}, False),
        ({"tokenRateLimits": [{"limit": 1, "window": "1m"}], "unlimited": True}, False),
        ({"tokenRateLimits": []}, False),
    ],
    ids=["limits", "unlimited", "limits-unlimited-false", "neither", "unlimited-false", "both", "empty-limits"],
)
def test_each_model_ref_has_limits_xor_unlimited(entry: dict[str, Any], ok: bool) -> None:
    obj = sub_with(modelRefs=[{"name": "m", "namespace": "llm", **entry}])
    if ok:
        parse(MaaSSubscription, obj)
    else:
        with pytest.raises(ValidationError):
            parse(MaaSSubscription, obj)


@pytest.mark.parametrize("bad", ['a"b', "a'b", "a\\b", "a\nb", "a\x00b", "a\x7fb", "a\x85b", "tab\there"])
@pytest.mark.parametrize(
    "where",
    ["owner.users", "owner.groups", "organization.id", "tokenMetadata.costCenter", "tokenMetadata.labels"],
)
def test_values_interpolated_into_cel_or_headers_reject_unsafe_characters(bad: str, where: str) -> None:
    cases: dict[str, dict[str, Any]] = {
        "owner.users": {"owner": {"users": [bad]}},
        "owner.groups": {"owner": {"groups": [{"name": bad}]}},
        "organization.id": {"organization": {"id": bad}},
        "tokenMetadata.costCenter": {"tokenMetadata": {"costCenter": bad}},
        "tokenMetadata.labels": {"tokenMetadata": {"labels": {"k": bad}}},
    }
    spec = cases[where]
    with pytest.raises(ValidationError, match="must not contain quotes, backslashes or control characters"):
        parse(MaaSSubscription, sub_with(**spec))


@pytest.mark.parametrize("good", ["*", "alice@example.com", "system:authenticated", "CN=x,O=y", "ünïcode"])
def test_ordinary_names_are_safe(good: str) -> None:
    assert not has_unsafe_chars(good)
    parse(MaaSSubscription, sub_with(owner={"users": [good], "groups": [{"name": good}]}))


def test_wildcard_subscriber_is_accepted_as_written() -> None:
    sub = parse(MaaSSubscription, examples.SEED_004_SUBSCRIPTION)
    assert sub.spec.owner.users == ["*"]


def test_organization_id_must_be_non_empty() -> None:
    with pytest.raises(ValidationError, match="id"):
        parse(MaaSSubscription, sub_with(organization={"id": ""}))
    with pytest.raises(ValidationError, match="id"):
        parse(MaaSSubscription, sub_with(organization={}))


@pytest.mark.parametrize(
    "subjects",
    [{}, {"groups": []}, {"users": []}, {"groups": [], "users": []}],
    ids=["none", "empty-groups", "empty-users", "both-empty"],
)
def test_auth_policy_subjects_need_a_group_or_user(subjects: dict[str, Any]) -> None:
    obj = copy.deepcopy(examples.SEED_001_AUTH_POLICY)
    obj["spec"]["subjects"] = subjects
    with pytest.raises(ValidationError, match="at least one group or user"):
        parse(MaaSAuthPolicy, obj)


def test_inference_priority_absent_differs_from_zero_and_priority_defaults_to_zero() -> None:
    absent = parse(MaaSSubscription, examples.SEED_001_SUBSCRIPTION)
    zero = parse(MaaSSubscription, sub_with(inferencePriority=0))
    negative = parse(MaaSSubscription, sub_with(inferencePriority=-7))
    assert absent.spec.inference_priority is None
    assert "inferencePriority" not in dump(absent)["spec"]
    assert dump(zero)["spec"]["inferencePriority"] == 0
    assert negative.spec.inference_priority == -7
    assert absent.spec.priority == 0


@pytest.mark.parametrize("field", ["priority", "inferencePriority"])
def test_priorities_are_int32(field: str) -> None:
    parse(MaaSSubscription, sub_with(**{field: -(2**31)}))
    with pytest.raises(ValidationError):
        parse(MaaSSubscription, sub_with(**{field: 2**31}))


@pytest.mark.parametrize(
    ("endpoint", "ok"),
    [
        ("https://host/v1", True),
        ("https://api.example.com", True),
        ("http://10.0.0.1:8000/v1", True),
        ("api.openai.com", True),  # the reference's host form (port/TLS from annotations)
        ("localhost", True),
        ("api.openai.com:443", False),
        ("-bad.example", False),
        ("ftp://host/v1", False),
        ("host/v1", False),
        ("https://host/v1?x=1", False),
        ("https://host/v 1", False),
        ('https://host/v1"', False),
    ],
)
def test_external_model_endpoint_is_an_http_base_url_or_a_host(endpoint: str, ok: bool) -> None:
    obj = examples.example("seed004-external-model-no-key")
    obj["spec"]["endpoint"] = endpoint
    model = KIND_BY_NAME["ExternalModel"]
    if ok:
        parse(model, obj)
    else:
        with pytest.raises(ValidationError, match=r"endpoint must be a host name .* or an absolute http"):
            parse(model, obj)


def test_unknown_spec_fields_are_refused_for_our_kinds() -> None:
    with pytest.raises(ValidationError, match="extra"):
        parse(MaaSSubscription, sub_with(tokenRateLimit=[]))


@pytest.mark.parametrize(
    "model",
    [k for k in KINDS],
    ids=[k.__name__ for k in KINDS],
)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing: list[str] = []

    def walk(m: type[BaseModel], path: str) -> None:
        for name, info in m.model_fields.items():
            if not info.description:
                missing.append(f"{path}.{name}")
            if name == "metadata":
                continue  # standard ObjectMeta, described by Kubernetes itself
            for sub in _models_in(info.annotation):
                walk(sub, f"{path}.{name}")

    walk(model, model.__name__)
    assert missing == []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


# --- external kinds -------------------------------------------------------------------------------------------

LLMISVC = {
    "apiVersion": "serving.kserve.io/v1alpha2",
    "kind": "LLMInferenceService",
    "metadata": {"name": "granite-3b", "namespace": "llm", "generation": 3},
    "spec": {"model": {"uri": "hf://ibm/granite"}},
    "status": {
        "url": "https://gw.example.com/llm/granite-3b",
        "addresses": [{"name": "gateway-external", "url": "https://gw.example.com/llm/granite-3b"}],
        "conditions": [
            {"type": "Ready", "status": "True", "severity": "Info"},
            {"type": "RouterReady", "status": "True"},
        ],
        "router": {
            "gateways": [
                {
                    "name": "maas-default-gateway",
                    "namespace": "openshift-ingress",
                    "httpRoutes": [{"name": "granite-3b-kserve-route", "namespace": "llm"}],
                    "listeners": [{"name": "https"}],
                }
            ],
            "scheduler": {
                "inferencePool": {
                    "group": "inference.networking.k8s.io",
                    "kind": "InferencePool",
                    "name": "granite-3b-inference-pool",
                    "namespace": "llm",
                },
                "service": {"name": "granite-3b-epp-service"},
            },
            "futureField": {"x": 1},
        },
        "workloads": {"primary": {"name": "w"}},
    },
}


def test_llm_inference_service_exposes_pool_routes_and_readiness_and_keeps_unknown_fields() -> None:
    svc = parse(LLMInferenceService, LLMISVC)
    assert svc.ready
    pool = svc.inference_pool
    assert pool is not None and pool.name == "granite-3b-inference-pool" and pool.kind == "InferencePool"
    assert [r.name for r in svc.http_routes] == ["granite-3b-kserve-route"]
    dumped = dump(svc)
    assert dumped["status"]["workloads"] == {"primary": {"name": "w"}}
    assert dumped["status"]["router"]["futureField"] == {"x": 1}


def test_llm_inference_service_before_router_status() -> None:
    svc = parse(LLMInferenceService, {"metadata": {"name": "old"}, "status": {"url": "http://x"}})
    assert svc.inference_pool is None and svc.http_routes == [] and not svc.ready


def test_http_route_attachment_and_acceptance() -> None:
    route = parse(
        HTTPRoute,
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "llm"},
            "spec": {
                "parentRefs": [{"name": "gw", "namespace": "gw-ns"}, {"name": "local"}],
                "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}],
            },
            "status": {
                "parents": [
                    {
                        "parentRef": {"name": "gw", "namespace": "gw-ns"},
                        "controllerName": "x/y",
                        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}],
                    }
                ]
            },
        },
    )
    assert route.attached_to("gw-ns", "gw") and route.attached_to("llm", "local")
    assert not route.attached_to("other", "gw")
    assert route.accepted_by("gw-ns", "gw") and not route.accepted_by("llm", "local")


def test_generation_fields_are_int64_and_non_negative() -> None:
    base = {**examples.SEED_001_SUBSCRIPTION}
    parse(MaaSSubscription, {**base, "status": {"observedGeneration": 2**63 - 1}})
    for bad in (2**63, -1):
        with pytest.raises(ValidationError):
            parse(MaaSSubscription, {**base, "status": {"observedGeneration": bad}})


def test_a_process_builds_the_validators_of_the_kinds_it_parses_only() -> None:
    """Building every model's validator at import cost each process ~70 ms of its start (issue 39); built on
    first use, a kind's validator parses and refuses exactly as before (the tests above), and a kind the
    process never parses costs nothing."""
    import json
    import subprocess
    import sys

    code = ("import json, maasctl.app\n"
            "from maasctl.api import MaaSSubscription, parse\n"
            "from maasctl.api.crdgen import KINDS\n"
            f"parse(MaaSSubscription, {examples.ALL['seed001-subscription']!r})\n"
            "print(json.dumps(sorted(k.__name__ for k in KINDS if k.__pydantic_complete__)))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.splitlines()[-1]) == ["MaaSSubscription"]
