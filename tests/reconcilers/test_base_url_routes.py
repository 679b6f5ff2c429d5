"""The one base URL and the completion ceiling on a generated route, against the real control plane: the API
server stores the base-URL rules (its HTTPRoute schema validates them), the gateway's route table built from
what it stored routes by the model header, and the model's policies target the route that carries them."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s

from maasctl.contract.edge import CREDENTIAL_HEADERS
from maasctl.contract.routing import (
    BASE_INFERENCE_PATHS,
    BASE_URL_MODEL_ANNOTATION,
    BASE_URL_PREFIX_ANNOTATION,
    MODEL_HEADER,
)
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.gateway.routes import build_route_table
from maasctl.gateway.state import InClusterModel, Snapshot, in_cluster_models
from tests.reconcilers.conftest import GATEWAY_NAME, GATEWAY_NS, SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import (
    auth_policy,
    create_secret,
    external_model,
    model_ref,
    subscription,
    uid,
)
from tests.reconcilers.test_llmisvc import kserve_route, llmisvc

CEILING = "maas.opendatahub.io/max-completion-tokens"


async def test_generated_route_serves_the_base_url_and_carries_the_ceiling(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await create_secret(kube, namespace, "provider-key")
    await objs.create(external_model(namespace, "provider"))
    await objs.create({"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
                       "metadata": {"name": "bounded", "namespace": namespace},
                       "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"},
                                "maxCompletionTokens": 256}})
    ap, sub = f"ap-{uid()}", f"sub-{uid()}"
    await objs.create(auth_policy(ap, [(namespace, "bounded")], ["premium-users"]))
    await objs.create(subscription(sub, [(namespace, "bounded")], "premium-users"))

    async def route_with(ceiling: str | None) -> dict[str, Any] | None:
        route = await objs.get("HTTPRoute", namespace, "maas-bounded")
        if route is None:
            return None
        return route if (route["metadata"].get("annotations") or {}).get(CEILING) == ceiling else None

    route = await eventually(lambda: route_with("256"))
    rules = route["spec"]["rules"]
    assert len(rules) == 2 + len(BASE_INFERENCE_PATHS)  # the model's own path, its Messages door, the base URL's
    headers = {h["value"] for r in rules[2:] for m in r["matches"] for h in m["headers"]}
    assert headers == {"provider", "bounded"}  # the published name and the MaaSModelRef's

    service = await k8s.CoreV1Api(kube).read_namespaced_service("maas-bounded", namespace)
    svc = kube.sanitize_for_serialization(service)
    table = build_route_table([route], lambda ns, name: svc if name == "maas-bounded" else None,
                              (GATEWAY_NAME, GATEWAY_NS))
    match = table.match("maas.example.test", "/v1/chat/completions", "POST", {MODEL_HEADER: "provider"})
    assert match is not None and match.rule.model == f"{namespace}/bounded"
    assert match.upstream_path == "/v1/chat/completions" and match.rule.completion_ceiling == 256
    assert table.match("maas.example.test", "/v1/chat/completions", "POST", {MODEL_HEADER: "other"}) is None

    async def policies() -> tuple[dict[str, Any], dict[str, Any]] | None:
        auth = await objs.get("AuthPolicy", namespace, "maas-auth-bounded")
        trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-bounded")
        return (auth, trlp) if auth and trlp else None

    for policy in await eventually(policies):  # whole-route targets: every rule, base-URL ones included
        assert policy["spec"]["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                               "name": "maas-bounded"}
        assert "sectionName" not in policy["spec"]["targetRef"]

    # Removing the setting removes the annotation: the data plane falls back to its default.
    await objs.patch("MaaSModelRef", namespace, "bounded", {"spec": {"maxCompletionTokens": None}})
    await eventually(lambda: route_with(None))
    await objs.delete("MaaSSubscription", SUB_NS, sub)
    await objs.delete("MaaSAuthPolicy", SUB_NS, ap)


async def test_a_wired_gateways_external_route_leaves_authorization_to_the_processor(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The session control plane serves Istio's API, so the controller wires the payload processor into the
    managed Gateway (failing closed); its ExternalModel routes then stop removing `authorization` (Envoy would
    remove the provider key the processor set there, after ext_proc) and still remove every other caller
    credential."""
    await create_secret(kube, namespace, "provider-key")
    await objs.create(external_model(namespace, "keyed"))
    await objs.create({"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
                       "metadata": {"name": "keyed", "namespace": namespace},
                       "spec": {"modelRef": {"kind": "ExternalModel", "name": "keyed"}}})

    async def wired() -> dict[str, Any] | None:
        gw = await objs.get("Gateway", GATEWAY_NS, GATEWAY_NAME)
        conds = ((gw or {}).get("status") or {}).get("conditions") or ()
        return next((c for c in conds if c["type"] == "PayloadProcessorWired" and c["status"] == "True"), None)

    assert (await eventually(wired))["reason"] == "IstioEnvoyFilter"

    async def removed() -> set[str] | None:
        route = await objs.get("HTTPRoute", namespace, "maas-keyed")
        if route is None:
            return None
        lists = [set(f["requestHeaderModifier"]["remove"]) for r in route["spec"]["rules"] for f in r["filters"]
                 if f["type"] == "RequestHeaderModifier"]
        return lists[0] if lists and all(x == lists[0] for x in lists) and "authorization" not in lists[0] else None

    assert await eventually(removed) == (CREDENTIAL_HEADERS - {"authorization"}) | {"x-maas-identity"}


async def test_an_in_cluster_models_policy_names_it_for_the_base_url(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    """KServe's route gets no rules of ours: the model's generated AuthPolicy names the model and its path, from
    the URL the LLMInferenceService reports, and the gateway sends a base-URL request naming it to that path."""
    llm = await objs.create({**llmisvc(namespace, "granite"),
                             "spec": {"model": {"uri": "hf://ibm/granite", "name": "ibm/granite-8b"}}})
    await objs.create(kserve_route(namespace, "granite", owner=llm))
    await objs.create(model_ref(namespace, "granite", "LLMInferenceService", "granite"))
    ap, sub = f"ap-{uid()}", f"sub-{uid()}"
    await objs.create(auth_policy(ap, [(namespace, "granite")], ["premium-users"]))
    await objs.create(subscription(sub, [(namespace, "granite")], "premium-users"))

    async def annotated(prefix: str | None) -> dict[str, Any] | None:
        policy = await objs.get("AuthPolicy", namespace, "maas-auth-granite")
        notes = (policy or {}).get("metadata", {}).get("annotations") or {}
        return policy if policy and notes.get(BASE_URL_PREFIX_ANNOTATION) == prefix else None

    await eventually(lambda: annotated(None))  # no URL reported yet: not on the base URL
    await objs.patch_status("LLMInferenceService", namespace, "granite", {"status": {
        "url": f"https://maas.example.test/{namespace}/granite",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    policy = await eventually(lambda: annotated(f"/{namespace}/granite"))
    assert policy["metadata"]["annotations"][BASE_URL_MODEL_ANNOTATION] == "ibm/granite-8b"  # the served name

    # The gateway's view of what the API server stored: the name goes to KServe's route, by its own path.
    route = await objs.get("HTTPRoute", namespace, "granite-kserve-route")
    assert route is not None
    svc = {"metadata": {"name": "granite-svc", "namespace": namespace,
                        "annotations": {LOCAL_URL_ANNOTATION: "http://127.0.0.1:9"}}, "spec": {}}
    snap = Snapshot(1, build_route_table([route], lambda ns, name: svc, (GATEWAY_NAME, GATEWAY_NS)))
    snap.in_cluster = in_cluster_models([policy], set(snap.table.routes()))
    assert snap.in_cluster["ibm/granite-8b"] == InClusterModel(f"/{namespace}/granite",
                                                               f"{namespace}/granite-kserve-route")

    # KServe moves the model: the policy follows.
    await objs.patch_status("LLMInferenceService", namespace, "granite", {"status": {
        "url": f"https://maas.example.test/{namespace}/granite-v2"}})
    await eventually(lambda: annotated(f"/{namespace}/granite-v2"))
    await objs.delete("MaaSSubscription", SUB_NS, sub)
    await objs.delete("MaaSAuthPolicy", SUB_NS, ap)
