"""InferenceObjective builder and its deterministic name."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.builders.inferenceobjective import (
    InferenceObjectiveInput,
    build_inference_objective,
    is_objective_ours,
    objective_name,
)
from maasctl.builders.refs import ObjectRef
from maasctl.builders.validation import InvalidInputError

SUB = ObjectRef("maas", "premium")
POOL = ObjectRef("llm", "granite-inference-pool")
MODEL = ObjectRef("llm", "granite")


def test_exact_object() -> None:
    obj = build_inference_objective(InferenceObjectiveInput(SUB, POOL, MODEL, 10))
    name = objective_name(SUB, POOL)
    assert re.fullmatch(r"maas-premium-[0-9a-f]{10}", name)
    assert obj == {
        "apiVersion": "llm-d.ai/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {
            "name": name,
            "namespace": "llm",
            "labels": {
                "app.kubernetes.io/managed-by": "maas-controller",
                "app.kubernetes.io/part-of": "maas-subscription",
                "app.kubernetes.io/component": "inference-objective",
                "maas.opendatahub.io/model": "granite",
                "maas.opendatahub.io/model-namespace": "llm",
                "maas.opendatahub.io/subscription": "premium",
                "maas.opendatahub.io/subscription-namespace": "maas",
            },
        },
        "spec": {
            "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                        "name": "granite-inference-pool"},
            "priority": 10,
        },
    }


@pytest.mark.parametrize("priority", [pytest.param(0, id="zero"), pytest.param(-5, id="negative"),
                                      pytest.param(2**31 - 1, id="int32-max")])
def test_priority_does_not_change_the_name(priority: int) -> None:
    obj = build_inference_objective(InferenceObjectiveInput(SUB, POOL, MODEL, priority))
    assert obj["metadata"]["name"] == objective_name(SUB, POOL)
    assert obj["spec"]["priority"] == priority


@pytest.mark.parametrize(
    "inp",
    [
        pytest.param(InferenceObjectiveInput(SUB, POOL, MODEL, 2**31), id="above-int32"),
        pytest.param(InferenceObjectiveInput(SUB, POOL, MODEL, -(2**31) - 1), id="below-int32"),
        pytest.param(InferenceObjectiveInput(SUB, POOL, MODEL, True), id="bool"),
        pytest.param(InferenceObjectiveInput(SUB, ObjectRef("llm", "Bad Pool"), MODEL, 1), id="bad-pool"),
    ],
)
def test_invalid_inputs(inp: InferenceObjectiveInput) -> None:
    with pytest.raises(InvalidInputError):
        build_inference_objective(inp)


refs = st.builds(ObjectRef, st.text(max_size=70), st.text(max_size=300))


@given(refs, refs, refs, refs)
def test_name_is_a_dns_label_unique_per_subscription_and_pool(a: ObjectRef, b: ObjectRef, p: ObjectRef,
                                                              q: ObjectRef) -> None:
    name = objective_name(a, p)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert objective_name(a, p) == name
    if (a, p) != (b, q):
        assert objective_name(b, q) != name


@pytest.mark.parametrize(
    ("labels", "ours"),
    [
        pytest.param({"app.kubernetes.io/managed-by": "maas-controller", "maas.opendatahub.io/subscription": "premium",
                      "maas.opendatahub.io/subscription-namespace": "maas"}, True, id="ours"),
        pytest.param({"app.kubernetes.io/managed-by": "maas-controller", "maas.opendatahub.io/subscription": "free",
                      "maas.opendatahub.io/subscription-namespace": "maas"}, False, id="other-subscription"),
        pytest.param({"maas.opendatahub.io/subscription": "premium",
                      "maas.opendatahub.io/subscription-namespace": "maas"}, False, id="not-managed"),
        pytest.param(None, False, id="no-labels"),
    ],
)
def test_is_objective_ours(labels: dict[str, str] | None, ours: bool) -> None:
    assert is_objective_ours({"metadata": {"labels": labels}}, SUB) is ours
