"""An ExternalModel with fallbacks (several providers, issue 38): the controller routes its model to the payload
processor's provider relay, writes the provider plan on the route (Secret names, never keys), labels every
provider's Secret, and reports each provider in the ExternalModel's status; an unsafe fallback endpoint withdraws
the route as an unsafe first endpoint does."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s

from maasctl.contract.providers import PROVIDERS_ANNOTATION, decode_plan
from tests.reconcilers.conftest import Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import create_secret, external_model, model_ref


def _with_fallbacks(ns: str, name: str) -> dict[str, Any]:
    em = external_model(ns, name)
    em["spec"]["fallbacks"] = [
        {"name": "backup", "provider": "anthropic", "apiFormat": "messages", "endpoint": "https://api.backup.test/v1",
         "targetModel": "claude-x", "credentialRef": {"name": "backup-key"}},
        {"name": "azure-eu", "provider": "azure", "endpoint": "azure.eu.test", "targetModel": "gpt-x-eu"},
    ]
    return em


async def _provider_status(objs: Objects, ns: str, name: str, ready: bool) -> dict[str, Any] | None:
    em = await objs.get("ExternalModel", ns, name)
    status = (em or {}).get("status") or {}
    return em if status.get("providers") and (status.get("phase") == "Ready") == ready else None


async def test_a_model_with_fallbacks_is_routed_to_the_relay_with_its_plan(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await create_secret(kube, namespace, "provider-key")
    await objs.create(_with_fallbacks(namespace, "multi"))
    await objs.create(model_ref(namespace, "multi", "ExternalModel", "multi"))

    em = await eventually(lambda: _provider_status(objs, namespace, "multi", ready=False))
    assert [(p["name"], p["ready"], p["reason"]) for p in em["status"]["providers"]] == [
        ("openai", True, "Ready"), ("backup", False, "CredentialNotFound"), ("azure-eu", True, "Ready")]
    ready = next(c for c in em["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "CredentialNotFound" and ready["message"].startswith("provider backup:")

    await create_secret(kube, namespace, "backup-key")
    # Secrets are not watched (the controller looks again after 30 s): a change of the model reconciles it now
    await objs.patch("ExternalModel", namespace, "multi", {"metadata": {"annotations": {"touched": "1"}}})
    await eventually(lambda: _provider_status(objs, namespace, "multi", ready=True))
    secret = await k8s.CoreV1Api(kube).read_namespaced_secret("backup-key", namespace)
    assert secret.metadata.labels["maas.opendatahub.io/upstream-key"] == "true"

    route = await eventually(lambda: objs.get("HTTPRoute", namespace, "maas-multi"))
    plan = decode_plan(route["metadata"]["annotations"][PROVIDERS_ANNOTATION])
    assert [(p.name, p.base_url, p.target_model, p.api_format, p.key_scheme, p.secret) for p in plan.providers] == [
        ("openai", "https://api.provider.test/v1", "gpt-x", "openai-chat", "bearer", "provider-key"),
        ("backup", "https://api.backup.test/v1", "claude-x", "messages", "x-api-key", "backup-key"),
        ("azure-eu", "https://azure.eu.test/v1", "gpt-x-eu", "openai-chat", "api-key", None)]
    assert "sk-upstream-secret" not in str(route)
    assert "maas.opendatahub.io/upstream-key-secret" not in route["metadata"]["annotations"]
    assert {r["filters"][0]["urlRewrite"]["path"]["replaceFullPath"] for r in route["spec"]["rules"]} == {
        "/v1/chat/completions"}
    service = await k8s.CoreV1Api(kube).read_namespaced_service("maas-multi", namespace)
    assert service.spec.external_name == "maas-payload-processor.opendatahub.svc.cluster.local"
    assert service.spec.ports[0].port == 9005

    # a fallback aimed at cloud metadata: the route is withdrawn, as for an unsafe first endpoint
    await objs.patch("ExternalModel", namespace, "multi", {"spec": {"fallbacks": [
        {"name": "backup", "provider": "openai", "endpoint": "http://169.254.169.254/v1", "targetModel": "x"}]}})

    async def withdrawn() -> bool:
        return await objs.get("HTTPRoute", namespace, "maas-multi") is None

    await eventually(withdrawn)
    em = await eventually(lambda: _provider_status(objs, namespace, "multi", ready=False))
    assert em["status"]["providers"][1]["reason"] == "InvalidEndpoint"
