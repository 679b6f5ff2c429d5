"""Sample resources for `maasctl dev` and the e2e journeys: one external model, one in-cluster model (an
LLMInferenceService whose route a KServe controller would have created), an auth policy and two subscriptions.

Pure functions: they return the objects; the caller applies them.
"""

from __future__ import annotations

from typing import Any

from maasctl.builders.maasapi import NAME as MAAS_API
from maasctl.builders.maasapi import PORT as MAAS_API_PORT
from maasctl.builders.maasapi import maas_api_auth_policy, maas_api_route
from maasctl.builders.refs import GatewayRef
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.settings import ControllerSettings

MODEL_NAMESPACE = "llm"
UPSTREAM_KEY = "dev-upstream-key"  # what the local test model demands from the gateway; not a real secret
EXTERNAL_MODEL = "gpt-x"
IN_CLUSTER_MODEL = "granite"
MAAS = "maas.opendatahub.io/v1alpha1"


def gateway(settings: ControllerSettings, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": settings.gateway_name, "namespace": settings.gateway_namespace},
        "spec": {
            "gatewayClassName": "maasctl-local",
            "listeners": [{"name": "http", "port": port, "protocol": "HTTP",
                           "allowedRoutes": {"namespaces": {"from": "All"}}}],
        },
    }


def gateway_status() -> dict[str, Any]:
    """What a gateway controller would report: the address the local data plane listens on."""
    return {"status": {"addresses": [{"type": "IPAddress", "value": "127.0.0.1"}]}}


def maas_api(settings: ControllerSettings, api_url: str) -> list[dict[str, Any]]:
    """maas-api on the local gateway, as `manifests/base/maas-api` installs it in a cluster (`/maas-api/v1/...`
    and `GET /v1/models` on the one base URL), reached at `api_url`. The TokenReview audiences are left to the
    local data plane (the API server's own)."""
    ns = settings.leader_election_namespace
    gateway = GatewayRef(settings.gateway_namespace, settings.gateway_name)
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": MAAS_API, "namespace": ns, "annotations": {LOCAL_URL_ANNOTATION: api_url}},
               "spec": {"ports": [{"name": "http", "port": MAAS_API_PORT}], "selector": {"app": MAAS_API}}}
    return [service, maas_api_route(ns, gateway), maas_api_auth_policy(ns, ())]


def models(settings: ControllerSettings, model_url: str, incluster_url: str) -> list[dict[str, Any]]:
    """The two published models: an external provider at `model_url` (demanding the upstream key) and an
    in-cluster workload reached at `incluster_url`."""
    ns = MODEL_NAMESPACE
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": ns},
         "stringData": {"api-key": UPSTREAM_KEY}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": EXTERNAL_MODEL, "namespace": ns},
         "spec": {"provider": "openai", "endpoint": f"{model_url}/v1", "targetModel": EXTERNAL_MODEL,
                  "credentialRef": {"name": "provider-key"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": EXTERNAL_MODEL, "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": EXTERNAL_MODEL}}},
        {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
         "metadata": {"name": IN_CLUSTER_MODEL, "namespace": ns},
         # the route below is ours, not KServe's: the LLMInferenceService names it (`refs`), as a user would
         "spec": {"router": {"route": {"http": {"refs": [{"name": f"{IN_CLUSTER_MODEL}-kserve-route"}]}}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": f"{IN_CLUSTER_MODEL}-workload", "namespace": ns,
                      "annotations": {LOCAL_URL_ANNOTATION: incluster_url}},
         "spec": {"ports": [{"name": "http", "port": 8000}], "selector": {"app": IN_CLUSTER_MODEL}}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": f"{IN_CLUSTER_MODEL}-kserve-route", "namespace": ns, "labels": {
             "app.kubernetes.io/name": IN_CLUSTER_MODEL,
             "app.kubernetes.io/component": "llminferenceservice-router",
             "app.kubernetes.io/part-of": "llminferenceservice"}},
         "spec": {"parentRefs": [{"name": settings.gateway_name, "namespace": settings.gateway_namespace}],
                  "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{IN_CLUSTER_MODEL}"}}],
                             "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                 "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                             "backendRefs": [{"name": f"{IN_CLUSTER_MODEL}-workload", "port": 8000}]}]}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": IN_CLUSTER_MODEL, "namespace": ns},
         "spec": {"modelRef": {"kind": "LLMInferenceService", "name": IN_CLUSTER_MODEL}}},
    ]


def llm_ready_status(gateway_url: str) -> dict[str, Any]:
    """What KServe would report once the in-cluster model is up: its URL on the gateway."""
    url = f"{gateway_url}/{MODEL_NAMESPACE}/{IN_CLUSTER_MODEL}"
    return {"status": {"url": url, "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def access(settings: ControllerSettings) -> list[dict[str, Any]]:
    """Who may use the models, and with which limits."""
    ns, sub_ns = MODEL_NAMESPACE, settings.subscription_namespace
    refs = [{"name": EXTERNAL_MODEL, "namespace": ns}, {"name": IN_CLUSTER_MODEL, "namespace": ns}]
    return [
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": "all-users", "namespace": sub_ns},
         "spec": {"modelRefs": refs, "subjects": {"groups": [{"name": "premium-users"}, {"name": "free-users"}]}}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription",
         "metadata": {"name": "premium", "namespace": sub_ns,
                      "annotations": {"openshift.io/display-name": "Premium Subscription"}},
         "spec": {"owner": {"groups": [{"name": "premium-users"}]}, "priority": 10,
                  "organization": {"id": "acme"},
                  "modelRefs": [{**r, "tokenRateLimits": [{"limit": 100000, "window": "1m"},
                                                          {"limit": 1000000, "window": "24h"}]} for r in refs]}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription",
         "metadata": {"name": "free", "namespace": sub_ns,
                      "annotations": {"openshift.io/display-name": "Free Subscription"}},
         "spec": {"owner": {"groups": [{"name": "free-users"}]},
                  "modelRefs": [{**refs[0], "tokenRateLimits": [{"limit": 1000, "window": "1m"}]}]}},
    ]
