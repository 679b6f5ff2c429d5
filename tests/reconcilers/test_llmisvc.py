"""A MaaSModelRef of an LLMInferenceService: the KServe-created route is found, validated and reported; only a
route the LLMInferenceService controls counts (labels alone can be set by anyone who may create HTTPRoutes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.reconcilers.conftest import GATEWAY_NAME, GATEWAY_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import model_ref


def llmisvc(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": {}}


def controller_ref(owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ownerReferences KServe sets on the objects it creates (`metav1.NewControllerRef`)."""
    meta = owner["metadata"]
    return [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def kserve_route(ns: str, llm: str, gateway: tuple[str, str] = (GATEWAY_NS, GATEWAY_NAME), *,
                 owner: Mapping[str, Any] | None, name: str | None = None) -> dict[str, Any]:
    """The router HTTPRoute KServe creates for `llm`, controlled by `owner` (the created LLMInferenceService; None:
    a look-alike nobody controls)."""
    meta: dict[str, Any] = {"name": name or f"{llm}-kserve-route", "namespace": ns, "labels": {
        "app.kubernetes.io/name": llm,
        "app.kubernetes.io/component": "llminferenceservice-router",
        "app.kubernetes.io/part-of": "llminferenceservice"}}
    if owner is not None:
        meta["ownerReferences"] = controller_ref(owner)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": meta,
        "spec": {"parentRefs": [{"name": gateway[1], "namespace": gateway[0]}],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{llm}"}}],
                            "backendRefs": [{"name": f"{llm}-svc", "port": 8000}]}]},
    }


async def phase_is(objs: Objects, ns: str, name: str, phase: str) -> dict[str, Any] | None:
    mr = await objs.get("MaaSModelRef", ns, name)
    return mr if mr and mr.get("status", {}).get("phase") == phase else None


async def test_llm_inference_service_model_moves_from_pending_to_ready(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    await objs.create(model_ref(namespace, "llama", "LLMInferenceService", "llama"))
    mr = await eventually(lambda: phase_is(objs, namespace, "llama", "Pending"))
    assert next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")["reason"] == "BackendNotFound"

    llm = await objs.create(llmisvc(namespace, "llama"))
    mr = await eventually(lambda: phase_is(objs, namespace, "llama", "Pending"))

    async def waiting_for_route() -> bool:
        mr = await objs.get("MaaSModelRef", namespace, "llama")
        ready = next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
        return bool(ready["reason"] == "RouteNotFound")

    await eventually(waiting_for_route)

    await objs.create(kserve_route(namespace, "llama", owner=llm))
    mr = await eventually(lambda: phase_is(objs, namespace, "llama", "Unhealthy"))
    assert mr["status"]["httpRoutes"] == [{"name": "llama-kserve-route", "namespace": namespace}]
    assert "endpoint" not in mr["status"]

    await objs.patch_status("LLMInferenceService", namespace, "llama", {"status": {
        "url": "https://llama.example.test",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    mr = await eventually(lambda: phase_is(objs, namespace, "llama", "Ready"))
    assert mr["status"]["endpoint"] == "https://llama.example.test"
    assert mr["status"]["gateways"] == [{"name": GATEWAY_NAME, "namespace": GATEWAY_NS}]


async def test_route_on_another_gateway_fails_the_model(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    llm = await objs.create(llmisvc(namespace, "other"))
    await objs.create(kserve_route(namespace, "other", gateway=("elsewhere", "private-gw"), owner=llm))
    await objs.create(model_ref(namespace, "other", "LLMInferenceService", "other"))
    mr = await eventually(lambda: phase_is(objs, namespace, "other", "Failed"))
    ready = next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NotOnGateway"
    assert f"{GATEWAY_NS}/{GATEWAY_NAME}" in ready["message"]
    assert "httpRoutes" not in mr["status"]


def _ready(mr: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")


async def test_only_the_route_the_llm_inference_service_controls_is_used(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """A namespace admin's HTTPRoute with KServe's labels (named to sort first, matching another namespace's
    model path) gets neither the model's status nor its AuthPolicy / TokenRateLimitPolicy; nor does one whose
    ownerReference is not a controller one or names another uid, kind or name. The route KServe made does."""
    llm = await objs.create(llmisvc(namespace, "granite"))
    decoy = kserve_route(namespace, "granite", owner=None, name="aaa-granite")
    decoy["spec"]["rules"][0]["matches"] = [{"path": {"type": "Exact", "value": "/llm-team-b/granite/v1/chat"}}]
    await objs.create(decoy)
    not_controller = kserve_route(namespace, "granite", owner=llm, name="aab-granite")
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    other_uid = kserve_route(namespace, "granite", owner=llm, name="aac-granite")
    other_uid["metadata"]["ownerReferences"][0]["uid"] = "0c4d2b1e-0000-4000-8000-000000000000"
    other_kind = kserve_route(namespace, "granite", owner=llm, name="aad-granite")
    other_kind["metadata"]["ownerReferences"][0]["kind"] = "InferenceService"
    for route in (not_controller, other_uid, other_kind):
        await objs.create(route)
    await objs.create(model_ref(namespace, "granite", "LLMInferenceService", "granite"))

    async def ignored() -> dict[str, Any] | None:
        mr = await objs.get("MaaSModelRef", namespace, "granite")
        return mr if mr and mr.get("status") and "neither controls them" in _ready(mr).get("message", "") else None

    mr = await eventually(ignored)
    assert (mr["status"]["phase"], _ready(mr)["reason"]) == ("Pending", "RouteNotFound")
    assert "HTTPRoute(s) carry its KServe labels" in _ready(mr)["message"]
    assert "httpRoutes" not in mr["status"]

    await objs.create(kserve_route(namespace, "granite", owner=llm))
    mr = await eventually(lambda: phase_is(objs, namespace, "granite", "Unhealthy"))
    assert mr["status"]["httpRoutes"] == [{"name": "granite-kserve-route", "namespace": namespace}]


async def test_a_route_the_llm_inference_service_names_is_used(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """An LLMInferenceService may bring its own HTTPRoute (`spec.router.route.http.refs`; KServe then makes
    none): that route is the model's, with or without KServe's labels and owner."""
    llm = llmisvc(namespace, "phi")
    llm["spec"] = {"router": {"route": {"http": {"refs": [{"name": "phi-own-route"}]}}}}
    await objs.create(llm)
    await objs.create(kserve_route(namespace, "phi", owner=None, name="aaa-phi"))  # a look-alike: ignored
    await objs.create(kserve_route(namespace, "phi", owner=None, name="phi-own-route"))
    await objs.create(model_ref(namespace, "phi", "LLMInferenceService", "phi"))
    mr = await eventually(lambda: phase_is(objs, namespace, "phi", "Unhealthy"))
    assert mr["status"]["httpRoutes"] == [{"name": "phi-own-route", "namespace": namespace}]
