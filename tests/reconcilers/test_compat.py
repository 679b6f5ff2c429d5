"""Manifests written for the reference MaaS apply unchanged (issue 16), against the real control plane:
LLMInferenceService in either KServe version, ExternalModel endpoints given as a host name, the model
identity a MaaSModelRef publishes and name conflicts between them, the reference's status reasons."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.reconcilers.subscription import PEERS_NAMED
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents, third_party_crd_files, wait_established
from tests.reconcilers.conftest import (
    GATEWAY_NAME,
    GATEWAY_NS,
    SUB_NS,
    Objects,
    RunningController,
    ensure_namespace,
    eventually,
    install_maas,
    start_controller,
)
from tests.reconcilers.test_core_flow import create_secret, external_model, model_ref, subscription
from tests.reconcilers.test_llmisvc import kserve_route

LLMISVC_CRD = "llminferenceservices.serving.kserve.io"


def llmisvc_v1alpha1(ns: str, name: str, served_as: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"uri": "hf://example/model", "name": served_as}} if served_as else {}
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


async def _ready_status(kube: k8s.ApiClient, version: str, ns: str, name: str, status: dict[str, Any]) -> None:
    await k8s.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        "serving.kserve.io", version, ns, "llminferenceservices", name, {"status": status},
        _content_type="application/merge-patch+json")


async def _phase(objs: Objects, ns: str, name: str, phase: str) -> dict[str, Any] | None:
    mr = await objs.get("MaaSModelRef", ns, name)
    return mr if mr and (mr.get("status") or {}).get("phase") == phase else None


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


READY = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


@pytest.fixture
async def v1alpha1_cluster() -> AsyncIterator[ControlPlane]:
    """A control plane whose KServe serves LLMInferenceService in v1alpha1 only (an older KServe, and the
    version seed 001 registers)."""
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    try:
        crds = [d for d in load_documents(third_party_crd_files()) if d["kind"] == "CustomResourceDefinition"]
        for crd in crds:
            if crd["metadata"]["name"] == LLMISVC_CRD:
                old = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
                crd["spec"]["versions"] = [{**copy.deepcopy(old), "served": True, "storage": True}]
                crd["spec"].pop("conversion", None)
        with cp.http_client() as http:
            names = await asyncio.to_thread(apply_documents, http, crds, field_manager="compat-test")
            await asyncio.to_thread(wait_established, http, names)
        await install_maas(cp)
        yield cp
    finally:
        await asyncio.to_thread(cp.stop)


async def test_a_cluster_serving_only_v1alpha1_llm_inference_services(v1alpha1_cluster: ControlPlane) -> None:
    kube = await connect(str(v1alpha1_cluster.kubeconfig))
    running = await start_controller(v1alpha1_cluster)
    try:
        ns = f"t-{uuid.uuid4().hex[:8]}"
        await ensure_namespace(k8s.CoreV1Api(kube), ns)
        objs = Objects(kube)
        await objs.create(model_ref(ns, "llama-ref", "LLMInferenceService", "llama"))
        llm = await k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
            "serving.kserve.io", "v1alpha1", ns, "llminferenceservices", llmisvc_v1alpha1(ns, "llama", "meta/llama"))
        await objs.create(kserve_route(ns, "llama", owner=llm))
        await _ready_status(kube, "v1alpha1", ns, "llama", {"url": "https://llama.example.test", **READY})
        mr = await eventually(lambda: _phase(objs, ns, "llama-ref", "Ready"), timeout=60)
        assert mr["status"]["endpoint"] == "https://llama.example.test"
        assert mr["status"]["resolvedModelAlias"] == "meta/llama"  # spec.model.name: what clients send
    finally:
        await running.stop()
        await kube.close()


async def test_v1alpha1_manifests_apply_where_both_versions_are_served(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await objs.create(model_ref(namespace, "granite", "LLMInferenceService", "granite"))
    llm = await k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
        "serving.kserve.io", "v1alpha1", namespace, "llminferenceservices", llmisvc_v1alpha1(namespace, "granite"))
    await objs.create(kserve_route(namespace, "granite", owner=llm))
    await _ready_status(kube, "v1alpha1", namespace, "granite", {"url": "https://granite.example.test", **READY})
    mr = await eventually(lambda: _phase(objs, namespace, "granite", "Ready"))
    assert mr["status"]["resolvedModelAlias"] == "granite"
    # the reference's flat route fields, besides maasctl's lists
    assert (mr["status"]["httpRouteName"], mr["status"]["httpRouteNamespace"]) == ("granite-kserve-route", namespace)
    assert (mr["status"]["httpRouteGatewayName"], mr["status"]["httpRouteGatewayNamespace"]) == (
        GATEWAY_NAME, GATEWAY_NS)
    # KServe (v1alpha2) reports the served model name under status.addresses[].models: that is the alias
    await _ready_status(kube, "v1alpha2", namespace, "granite", {
        "addresses": [{"url": "https://granite.example.test", "models": [{"name": "ibm/granite"}]}]})

    async def alias() -> bool:
        mr = await objs.get("MaaSModelRef", namespace, "granite")
        return bool(mr and mr["status"].get("resolvedModelAlias") == "ibm/granite")

    await eventually(alias)


async def test_external_model_endpoint_as_a_host_name(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The reference's form: `endpoint` is an FQDN; https on 443 (base path /v1) unless the
    `maas.opendatahub.io/port` / `maas.opendatahub.io/tls` annotations say otherwise."""
    await create_secret(kube, namespace, "provider-key")
    secure = external_model(namespace, "openai")
    secure["spec"]["endpoint"] = "api.openai.com"
    plain = external_model(namespace, "local")
    plain["spec"]["endpoint"] = "vllm.internal.example"
    plain["metadata"]["annotations"] = {"maas.opendatahub.io/tls": "false", "maas.opendatahub.io/port": "8000"}
    broken = external_model(namespace, "broken")
    broken["spec"]["endpoint"] = "api.example.com"
    broken["metadata"]["annotations"] = {"maas.opendatahub.io/port": "https"}
    for em in (secure, plain, broken):
        await objs.create(em)
        await objs.create(model_ref(namespace, em["metadata"]["name"], "ExternalModel", em["metadata"]["name"]))
    for name in ("openai", "local"):
        await eventually(lambda name=name: _phase(objs, namespace, name, "Ready"))  # type: ignore[misc]
    core = k8s.CoreV1Api(kube)
    svc = await core.read_namespaced_service("maas-openai", namespace)
    assert svc.spec.external_name == "api.openai.com"
    assert [(p.port, p.app_protocol) for p in svc.spec.ports] == [(443, "https")]
    route = await objs.get("HTTPRoute", namespace, "maas-openai")
    assert route is not None
    rewrite = route["spec"]["rules"][0]["filters"][0]["urlRewrite"]
    assert rewrite == {"hostname": "api.openai.com",
                       "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}
    svc = await core.read_namespaced_service("maas-local", namespace)
    assert [(p.port, p.app_protocol) for p in svc.spec.ports] == [(8000, "http")]

    failed = await eventually(lambda: _phase(objs, namespace, "broken", "Failed"))
    assert "maas.opendatahub.io/port" in _condition(failed, "Ready")["message"]

    async def em_failed() -> dict[str, Any] | None:
        em = await objs.get("ExternalModel", namespace, "broken")
        return em if em and (em.get("status") or {}).get("phase") == "Failed" else None

    assert _condition(await eventually(em_failed), "Ready")["reason"] == "InvalidEndpoint"


async def test_renamed_external_model_labels_and_identity_conflicts(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The published name is the ExternalModel's (not the provider's); two MaaSModelRefs publishing one name
    are flagged on both (informational, as in the reference) until one goes away, and the survivor gets a Normal
    `ModelNameConflictResolved` Event then (the reference's), once."""
    other = f"t-{uuid.uuid4().hex[:8]}"
    await ensure_namespace(k8s.CoreV1Api(kube), other)
    for ns in (namespace, other):
        await create_secret(kube, ns, "provider-key")
        em = external_model(ns, "company-chat")
        em["spec"]["targetModel"] = "gpt-4o-2024-08-06"
        await objs.create(em)
    await objs.create(model_ref(namespace, "chat", "ExternalModel", "company-chat"))
    mr = await eventually(lambda: _phase(objs, namespace, "chat", "Ready"))
    assert mr["status"]["resolvedModelAlias"] == "company-chat"
    assert _condition(mr, "ModelIdentityUnique")["status"] == "True"
    route = await objs.get("HTTPRoute", namespace, "maas-chat")
    assert route is not None
    assert route["metadata"]["labels"]["maas.opendatahub.io/external-model"] == "company-chat"
    notes = route["metadata"]["annotations"]
    assert notes["maas.opendatahub.io/published-model"] == "company-chat"
    assert notes["maas.opendatahub.io/target-model"] == "gpt-4o-2024-08-06"

    await objs.create(model_ref(other, "chat-too", "ExternalModel", "company-chat"))

    async def conflict(ns: str, name: str, state: str) -> dict[str, Any] | None:
        obj = await objs.get("MaaSModelRef", ns, name)
        conds = {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}
        cond = conds.get("ModelIdentityUnique")
        return obj if cond is not None and cond["status"] == state else None

    first = await eventually(lambda: conflict(namespace, "chat", "False"))
    second = await eventually(lambda: conflict(other, "chat-too", "False"))
    assert _condition(first, "ModelIdentityUnique")["reason"] == "ModelNameConflict"
    assert f"{other}/chat-too" in _condition(first, "ModelIdentityUnique")["message"]
    assert f"{namespace}/chat" in _condition(second, "ModelIdentityUnique")["message"]
    assert first["status"]["phase"] == "Ready"  # informational: the model is still served

    assert not await _events(kube, namespace, "chat", "ModelNameConflictResolved")  # not while it lasts
    await objs.delete("MaaSModelRef", other, "chat-too")
    await eventually(lambda: conflict(namespace, "chat", "True"))
    resolved = await eventually(lambda: _events(kube, namespace, "chat", "ModelNameConflictResolved"))
    assert [e.type for e in resolved] == ["Normal"] and "company-chat" in (resolved[0].note or "")
    await k8s.CoreV1Api(kube).delete_namespace(other)


async def _events(kube: k8s.ApiClient, namespace: str, name: str, reason: str) -> list[k8s.EventsV1Event]:
    listed = await k8s.EventsV1Api(kube).list_namespaced_event(namespace, field_selector=f"regarding.name={name}")
    return [e for e in listed.items if e.reason == reason and e.regarding.kind == "MaaSModelRef"]


async def test_subscription_reports_a_missing_model_as_not_found(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """The reference's reason for a MaaSModelRef that does not exist is `NotFound`."""

    name = f"s-{uuid.uuid4().hex[:6]}"
    await objs.create(subscription(name, [(namespace, "absent")], "g"))

    async def reported() -> dict[str, Any] | None:
        sub = await objs.get("MaaSSubscription", SUB_NS, name)
        refs = ((sub or {}).get("status") or {}).get("modelRefStatuses") or []
        return sub if refs and refs[0].get("reason") == "NotFound" else None

    sub = await eventually(reported)
    assert sub["status"]["phase"] == "Failed"
    await objs.delete("MaaSSubscription", SUB_NS, name)



async def test_shared_priority_is_flagged_on_both_subscriptions(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """SpecPriorityDuplicate (the reference's condition): True/SharedPriority while two subscriptions of the
    namespace share `spec.priority`, cleared on both when one moves."""
    a, b = (f"p-{uuid.uuid4().hex[:6]}" for _ in range(2))
    odd_priority = 7000 + int(uuid.uuid4().hex[:3], 16)  # no other test's subscription shares it
    for name in (a, b):
        sub = subscription(name, [(namespace, "m")], "g")
        sub["spec"]["priority"] = odd_priority
        await objs.create(sub)

    async def duplicate(name: str, state: str) -> dict[str, Any] | None:
        sub = await objs.get("MaaSSubscription", SUB_NS, name)
        conds = {c["type"]: c for c in ((sub or {}).get("status") or {}).get("conditions") or ()}
        cond = conds.get("SpecPriorityDuplicate")
        return sub if cond is not None and cond["status"] == state else None

    first = await eventually(lambda: duplicate(a, "True"))
    assert _condition(first, "SpecPriorityDuplicate")["reason"] == "SharedPriority"
    assert b in _condition(first, "SpecPriorityDuplicate")["message"]
    await eventually(lambda: duplicate(b, "True"))
    await objs.patch("MaaSSubscription", SUB_NS, b, {"spec": {"priority": odd_priority + 1}})
    for name in (a, b):
        await eventually(lambda name=name: duplicate(name, "False"))  # type: ignore[misc]
    for name in (a, b):
        await objs.delete("MaaSSubscription", SUB_NS, name)


async def test_joining_a_large_priority_group_rewrites_no_other_status(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """Beyond PEERS_NAMED peers the condition no longer names them, so one more subscription with the same
    priority changes nobody else's status: one write per change, not one per member of the group."""
    prefix = f"g-{uuid.uuid4().hex[:6]}"
    priority = 9000 + int(uuid.uuid4().hex[:3], 16)  # no other test's subscription shares it
    names = [f"{prefix}-{i}" for i in range(PEERS_NAMED + 3)]

    async def create(name: str) -> None:
        sub = subscription(name, [(namespace, "m")], "g")
        sub["spec"]["priority"] = priority
        await objs.create(sub)

    async def constant_message(name: str) -> dict[str, Any] | None:
        sub = await objs.get("MaaSSubscription", SUB_NS, name)
        conds = {c["type"]: c for c in ((sub or {}).get("status") or {}).get("conditions") or ()}
        cond = conds.get("SpecPriorityDuplicate")
        ok = cond is not None and cond["status"] == "True" and f"more than {PEERS_NAMED}" in cond["message"]
        return sub if ok else None

    for name in names[:-1]:
        await create(name)
    settled = {name: await eventually(lambda name=name: constant_message(name)) for name in names[:-1]}
    await create(names[-1])
    await eventually(lambda: constant_message(names[-1]))
    await asyncio.sleep(2)  # a requeued peer would have rewritten its status by now
    for name, before in settled.items():
        after = await objs.get("MaaSSubscription", SUB_NS, name)
        assert after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], name
    for name in names:
        await objs.delete("MaaSSubscription", SUB_NS, name)
