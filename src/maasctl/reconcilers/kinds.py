"""The kinds the reconcilers read and write, in the versions the target CRDs store.

LLMInferenceService is read in both versions KServe has served (`v1alpha2`, storage since KServe v0.17, and
`v1alpha1`, what older clusters and seed 001 register): the controller watches each version the cluster serves
(an unserved one waits for its CRD) and `routes.llm_inference_service` prefers `v1alpha2`."""

from __future__ import annotations

from typing import Final

from maasctl.runtime import GroupVersionKind

MAAS_GROUP: Final = "maas.opendatahub.io"
MAAS_VERSION: Final = "v1alpha1"

MAAS_MODEL_REF: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "MaaSModelRef")
EXTERNAL_MODEL: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "ExternalModel")
MAAS_AUTH_POLICY: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "MaaSAuthPolicy")
MAAS_SUBSCRIPTION: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "MaaSSubscription")
INFERENCE_EXTERNAL_MODEL: Final = GroupVersionKind("inference.opendatahub.io", "v1alpha1", "ExternalModel")
"""The reference's newer ExternalModel (`api.inference`), converted into ours (`reconcilers.inference`)."""
INFERENCE_EXTERNAL_PROVIDER: Final = GroupVersionKind("inference.opendatahub.io", "v1alpha1", "ExternalProvider")

HTTP_ROUTE: Final = GroupVersionKind("gateway.networking.k8s.io", "v1", "HTTPRoute")
GATEWAY: Final = GroupVersionKind("gateway.networking.k8s.io", "v1", "Gateway")
AUTH_POLICY: Final = GroupVersionKind("kuadrant.io", "v1", "AuthPolicy")
TOKEN_RATE_LIMIT_POLICY: Final = GroupVersionKind("kuadrant.io", "v1alpha1", "TokenRateLimitPolicy")
LLM_INFERENCE_SERVICE: Final = GroupVersionKind("serving.kserve.io", "v1alpha2", "LLMInferenceService")
LLM_INFERENCE_SERVICE_V1ALPHA1: Final = GroupVersionKind("serving.kserve.io", "v1alpha1", "LLMInferenceService")
LLM_INFERENCE_SERVICES: Final = (LLM_INFERENCE_SERVICE, LLM_INFERENCE_SERVICE_V1ALPHA1)
INFERENCE_OBJECTIVE: Final = GroupVersionKind("llm-d.ai", "v1alpha2", "InferenceObjective")
INFERENCE_POOL: Final = GroupVersionKind("inference.networking.k8s.io", "v1", "InferencePool")
SERVICE: Final = GroupVersionKind("", "v1", "Service")
SECRET: Final = GroupVersionKind("", "v1", "Secret")
GUARDRAILS_SETTINGS: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "GuardrailsSettings")
GUARDRAIL_CONFIG: Final = GroupVersionKind(MAAS_GROUP, MAAS_VERSION, "GuardrailConfig")
CONFIG_MAP: Final = GroupVersionKind("", "v1", "ConfigMap")
DEPLOYMENT: Final = GroupVersionKind("apps", "v1", "Deployment")
ENVOY_FILTER: Final = GroupVersionKind("networking.istio.io", "v1alpha3", "EnvoyFilter")
ENVOY_EXTENSION_POLICY: Final = GroupVersionKind("gateway.envoyproxy.io", "v1alpha1", "EnvoyExtensionPolicy")
