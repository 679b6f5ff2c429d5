"""The finalizer MutatingAdmissionPolicy on the real apiserver: new MaaSModelRefs and MaaSSubscriptions get the
controller's finalizer at admission (one write per object fewer), nothing else does.

Every create here is a dry run (admission runs, nothing is stored), and the policy is limited to this test's
namespaces and removed afterwards: other suites share the control plane and delete objects without a
controller running."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import DEFAULT_SUBSCRIPTION_NAMESPACE, GROUP, VERSION, admission
from maasctl.api.install import apply_finalizer_policy, install_crds
from tests.reconcilers.conftest import ensure_namespace

pytestmark = pytest.mark.integration

SUB_NS = DEFAULT_SUBSCRIPTION_NAMESPACE
OURS = admission.FINALIZER


def model_ref(ns: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"m-{uuid.uuid4().hex[:6]}", "namespace": ns}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSModelRef", "metadata": meta,
            "spec": {"modelRef": {"kind": "ExternalModel", "name": "p"}}}


def subscription() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSSubscription",
            "metadata": {"name": f"s-{uuid.uuid4().hex[:6]}", "namespace": SUB_NS},
            "spec": {"owner": {"groups": [{"name": "g"}]},
                     "modelRefs": [{"name": "m", "namespace": "x", "tokenRateLimits": [{"limit": 1, "window": "1m"}]}]}}


def external_model(ns: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ExternalModel",
            "metadata": {"name": f"p-{uuid.uuid4().hex[:6]}", "namespace": ns},
            "spec": {"provider": "openai", "endpoint": "https://api.provider.test/v1", "targetModel": "m"}}


@pytest.fixture
async def policy(kube: k8s.ApiClient, namespace: str) -> AsyncIterator[k8s.CustomObjectsApi]:
    await install_crds(kube)
    await ensure_namespace(k8s.CoreV1Api(kube), SUB_NS)
    assert await apply_finalizer_policy(kube, namespaces=[namespace, SUB_NS])
    custom = k8s.CustomObjectsApi(kube)
    try:
        for _ in range(150):  # policies are compiled and bound asynchronously
            try:
                if OURS in (await dry_create(custom, model_ref(namespace)))["metadata"].get("finalizers", []):
                    break
            except k8s.ApiException as exc:  # a CRD installed just now is Established before it is served
                if exc.status != 503:
                    raise
            await asyncio.sleep(0.2)
        yield custom
    finally:
        adm = k8s.AdmissionregistrationV1Api(kube)
        await adm.delete_mutating_admission_policy_binding(admission.FINALIZER_POLICY_NAME)
        await adm.delete_mutating_admission_policy(admission.FINALIZER_POLICY_NAME)


async def dry_create(custom: k8s.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    plural = {"MaaSModelRef": "maasmodelrefs", "MaaSSubscription": "maassubscriptions",
              "ExternalModel": "externalmodels"}[body["kind"]]
    created: dict[str, Any] = await custom.create_namespaced_custom_object(
        GROUP, VERSION, body["metadata"]["namespace"], plural, body, dry_run="All")
    return created


async def test_new_models_and_subscriptions_get_the_finalizer(policy: k8s.CustomObjectsApi, namespace: str) -> None:
    assert (await dry_create(policy, model_ref(namespace)))["metadata"]["finalizers"] == [OURS]
    assert (await dry_create(policy, subscription()))["metadata"]["finalizers"] == [OURS]


async def test_other_finalizers_are_kept_and_ours_is_never_doubled(
    policy: k8s.CustomObjectsApi, namespace: str
) -> None:
    kept = await dry_create(policy, model_ref(namespace, ["example.com/theirs"]))
    assert kept["metadata"]["finalizers"] == ["example.com/theirs", OURS]
    once = await dry_create(policy, model_ref(namespace, [OURS]))
    assert once["metadata"]["finalizers"] == [OURS]
    empty = await dry_create(policy, model_ref(namespace, []))
    assert empty["metadata"]["finalizers"] == [OURS]


async def test_other_kinds_and_unwatched_namespaces_are_left_alone(
    policy: k8s.CustomObjectsApi, kube: k8s.ApiClient
) -> None:
    other = f"unwatched-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(kube)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    try:
        assert not (await dry_create(policy, model_ref(other)))["metadata"].get("finalizers")
        assert not (await dry_create(policy, external_model(SUB_NS)))["metadata"].get("finalizers")
    finally:
        await core.delete_namespace(other)
