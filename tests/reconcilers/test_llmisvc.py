"""A MaaSModelRef of an LLMInferenceService: the KServe-created route is found, validated and reported."""

from __future__ import annotations

from typing import Any

from tests.reconcilers.conftest import GATEWAY_NAME, GATEWAY_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import model_ref


def llmisvc(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": {}}


def kserve_route(ns: str, llm: str, gateway: tuple[str, str] = (GATEWAY_NS, GATEWAY_NAME)) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": f"{llm}-kserve-route", "namespace": ns, "labels": {
            "app.kubernetes.io/name": llm,
            "app.kubernetes.io/component": "llminferenceservice-router",
            "app.kubernetes.io/part-of": "llminferenceservice"}},
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

    await objs.create(llmisvc(namespace, "llama"))
    mr = await eventually(lambda: phase_is(objs, namespace, "llama", "Pending"))

    async def waiting_for_route() -> bool:
        mr = await objs.get("MaaSModelRef", namespace, "llama")
        ready = next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
        return bool(ready["reason"] == "RouteNotFound")

    await eventually(waiting_for_route)

    await objs.create(kserve_route(namespace, "llama"))
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
    await objs.create(llmisvc(namespace, "other"))
    await objs.create(kserve_route(namespace, "other", gateway=("elsewhere", "private-gw")))
    await objs.create(model_ref(namespace, "other", "LLMInferenceService", "other"))
    mr = await eventually(lambda: phase_is(objs, namespace, "other", "Failed"))
    ready = next(c for c in mr["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NotOnGateway"
    assert f"{GATEWAY_NS}/{GATEWAY_NAME}" in ready["message"]
    assert "httpRoutes" not in mr["status"]
