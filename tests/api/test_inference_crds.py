"""The reference's inference.opendatahub.io ExternalProvider / ExternalModel CRDs as maasctl serves them: the
reference's fields (its manifests apply unchanged, with strict field validation), and maasctl's admission rules
refusing, on the real API server, what it cannot serve as the reference would."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import crdgen
from maasctl.api.inference import (
    AUTH_MESSAGE,
    FORMAT_MESSAGE,
    INFERENCE_GROUP,
    MODEL_NAME_MESSAGE,
    PATH_CHARS_MESSAGE,
    PATH_SUFFIX_MESSAGE,
    PROVIDER_MESSAGE,
    SIZE_MESSAGE,
    UNIQUE_MESSAGE,
    WEIGHT_MESSAGE,
    ExternalProvider,
    InferenceExternalModel,
)
from maasctl.api.install import install_crds
from tests.api.test_crds_integration import error_message

VERSION = "v1alpha1"
API_VERSION = f"{INFERENCE_GROUP}/{VERSION}"

# -- the reference's schema, field by field (read from its CRDs; names, types, bounds, required, enums) --------

# path -> (type, extra keywords that must be equal); a path absent here must not exist in the schema
PROVIDER_FIELDS: dict[str, tuple[str, dict[str, Any]]] = {
    ".spec": ("object", {"required": ["provider", "endpoint", "auth"]}),
    ".spec.provider": ("string", {"minLength": 1, "maxLength": 63}),
    ".spec.endpoint": ("string", {"minLength": 1, "maxLength": 253, "pattern":
                                  r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)+$"}),
    ".spec.auth": ("object", {"required": ["type", "secretRef"]}),
    ".spec.auth.type": ("string", {"enum": ["apikey", "simple", "sigv4", "oauth2"]}),
    ".spec.auth.secretRef": ("object", {"required": ["name"]}),
    ".spec.auth.secretRef.name": ("string", {"minLength": 1, "maxLength": 253,
                                             "pattern": r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$"}),
    ".spec.config": ("object", {}),
    ".status.phase": ("string", {"enum": ["Pending", "Ready", "Failed"]}),
}
MODEL_FIELDS: dict[str, tuple[str, dict[str, Any]]] = {
    ".spec": ("object", {"required": ["externalProviderRefs"]}),
    ".spec.modelName": ("string", {"maxLength": 253}),
    ".spec.externalProviderRefs": ("array", {"minItems": 1, "maxItems": 64}),
    ".spec.externalProviderRefs[]": ("object", {"required": ["ref", "targetModel", "apiFormat", "path"]}),
    ".spec.externalProviderRefs[].ref": ("object", {"required": ["name"]}),
    ".spec.externalProviderRefs[].ref.name": ("string", {"minLength": 1, "maxLength": 253,
                                                         "pattern": r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$"}),
    ".spec.externalProviderRefs[].targetModel": ("string", {"minLength": 1, "maxLength": 253}),
    ".spec.externalProviderRefs[].apiFormat": ("string", {"minLength": 1, "maxLength": 63}),
    ".spec.externalProviderRefs[].path": ("string", {"minLength": 1, "maxLength": 512, "pattern": "^/.*"}),
    ".spec.externalProviderRefs[].weight": ("integer", {"default": 1, "minimum": 0, "maximum": 100}),
    ".spec.externalProviderRefs[].auth": ("object", {"required": ["type", "secretRef"]}),
    ".spec.externalProviderRefs[].auth.type": ("string", {"enum": ["apikey", "simple", "sigv4", "oauth2"]}),
    ".spec.externalProviderRefs[].auth.secretRef": ("object", {"required": ["name"]}),
    ".spec.externalProviderRefs[].auth.secretRef.name": ("string", {"minLength": 1, "maxLength": 253,
                                                                    "pattern": r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$"}),
    ".spec.externalProviderRefs[].config": ("object", {}),
    ".status.phase": ("string", {"enum": ["Pending", "Ready", "Failed"]}),
    ".status.httpRouteName": ("string", {}),
}


def nodes(schema: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    out = {path: schema}
    for name, sub in schema.get("properties", {}).items():
        out.update(nodes(sub, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        out.update(nodes(schema["items"], f"{path}[]"))
    return out


@pytest.mark.parametrize(("kind", "fields"), [(ExternalProvider, PROVIDER_FIELDS),
                                              (InferenceExternalModel, MODEL_FIELDS)], ids=["provider", "model"])
def test_the_schema_has_the_references_fields(kind: Any, fields: dict[str, tuple[str, dict[str, Any]]]) -> None:
    crd = crdgen.crd(kind)
    assert crd["metadata"]["name"] == f"{kind.crd.plural}.{INFERENCE_GROUP}"
    assert crd["spec"]["names"]["kind"] == ("ExternalProvider" if kind is ExternalProvider else "ExternalModel")
    (version,) = crd["spec"]["versions"]
    assert version["name"] == VERSION and version["subresources"] == {"status": {}}
    found = nodes(version["schema"]["openAPIV3Schema"])
    spec_paths = {p for p in found if p.startswith(".spec")}
    assert spec_paths == {p for p in fields if p.startswith(".spec")}  # no field added, none missing
    for path, (type_, extra) in fields.items():
        node = found[path]
        assert node["type"] == type_, path
        for key, value in extra.items():
            assert node[key] == value, (path, key)
        if type_ == "object" and path.endswith("config"):
            assert node["additionalProperties"] == {"type": "string"}, path
    assert "conditions" in found[".status"]["properties"]


# -- on the API server ------------------------------------------------------------------------------------------

PLURALS = {"ExternalProvider": "externalproviders", "ExternalModel": "externalmodels"}


@pytest.fixture
async def inference(kube: k8s.ApiClient) -> k8s.CustomObjectsApi:
    await install_crds(kube)
    return k8s.CustomObjectsApi(kube)


async def create(api: k8s.CustomObjectsApi, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = await api.create_namespaced_custom_object(
        INFERENCE_GROUP, VERSION, obj["metadata"]["namespace"], PLURALS[obj["kind"]], obj,
        field_validation="Strict", **kw)
    return out


def provider(ns: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ExternalProvider", "metadata": {"name": "openai", "namespace": ns},
            "spec": {"provider": "openai", "endpoint": "api.openai.com",
                     "auth": {"type": "simple", "secretRef": {"name": "openai-credentials"}}, **spec}}


def ref(name: str = "openai", **extra: Any) -> dict[str, Any]:
    return {"ref": {"name": name}, "targetModel": "gpt-4o", "apiFormat": "openai-chat",
            "path": "/v1/chat/completions", **extra}


def model(ns: str, *refs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ExternalModel", "metadata": {"name": "gpt4", "namespace": ns},
            "spec": {"externalProviderRefs": list(refs or (ref(),)), **spec}}


def reference_manifests(ns: str) -> list[dict[str, Any]]:
    """As the reference's documentation and e2e suite write them (several providers, Anthropic, placeholders,
    per-binding auth and config, port/TLS annotations)."""
    anthropic = provider(ns, provider="anthropic", endpoint="api.anthropic.com",
                         auth={"type": "apikey", "secretRef": {"name": "anthropic-key"}})
    anthropic["metadata"]["name"] = "anthropic-prod"
    vertex = provider(ns, provider="vertex-openai", endpoint="us-central1-aiplatform.googleapis.com",
                      config={"project": "my-gcp-project", "location": "us-central1"})
    vertex["metadata"]["name"] = "vertex-gcp"
    vllm = provider(ns, endpoint="vllm.internal.svc")
    vllm["metadata"].update(name="my-vllm", annotations={"inference.opendatahub.io/port": "8080",
                                                         "inference.opendatahub.io/tls": "false"})
    claude = model(ns, ref("anthropic-prod", targetModel="claude-sonnet-4-20250514", apiFormat="messages",
                           path="/v1/messages"), modelName="claude")
    claude["metadata"]["name"] = "claude"
    gemini = model(ns, ref("vertex-gcp", targetModel="gemini-2.0-flash", config={"endpoint": "openapi"},
                           path="/v1/projects/{project}/locations/{location}/endpoints/{endpoint}/chat/completions"))
    gemini["metadata"]["name"] = "gemini"
    weighted = model(ns, ref(weight=80), ref("my-vllm", weight=20, auth={"type": "simple",
                                                                           "secretRef": {"name": "vllm-key"}}))
    return [provider(ns), anthropic, vertex, vllm, claude, gemini, weighted]


@pytest.mark.integration
async def test_the_references_manifests_are_accepted_as_written(
        inference: k8s.CustomObjectsApi, namespace: str) -> None:
    for obj in reference_manifests(namespace):
        stored = await create(inference, copy.deepcopy(obj))
        expected = copy.deepcopy(obj["spec"])
        for binding in expected.get("externalProviderRefs", ()):
            binding.setdefault("weight", 1)  # the reference's default, applied by the API server
        assert stored["spec"] == expected, obj["metadata"]["name"]


@pytest.mark.integration
async def test_status_round_trips_through_the_status_subresource(
        inference: k8s.CustomObjectsApi, namespace: str) -> None:
    await create(inference, model(namespace))
    status = {"phase": "Ready", "httpRouteName": "maas-gpt4", "conditions": [{
        "type": "Ready", "status": "True", "reason": "Reconciled", "message": "ok",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}
    await inference.patch_namespaced_custom_object_status(
        INFERENCE_GROUP, VERSION, namespace, "externalmodels", "gpt4", {"status": status},
        _content_type="application/merge-patch+json")
    got = await inference.get_namespaced_custom_object(INFERENCE_GROUP, VERSION, namespace, "externalmodels", "gpt4")
    assert got["status"] == status


INVALID: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("provider-sigv4", lambda ns: provider(ns, auth={"type": "sigv4", "secretRef": {"name": "aws"}}), AUTH_MESSAGE),
    ("provider-oauth2", lambda ns: provider(ns, auth={"type": "oauth2", "secretRef": {"name": "gcp"}}), AUTH_MESSAGE),
    ("provider-type-not-a-dns-label", lambda ns: provider(ns, provider="OpenAI"), PROVIDER_MESSAGE),
    ("provider-unknown-auth", lambda ns: provider(ns, auth={"type": "none", "secretRef": {"name": "x"}}),
     "Unsupported value"),
    ("provider-endpoint-with-scheme", lambda ns: provider(ns, endpoint="https://api.openai.com"), "should match"),
    ("model-format", lambda ns: model(ns, ref(apiFormat="vertex-messages")), FORMAT_MESSAGE),
    ("model-format-responses", lambda ns: model(ns, ref(apiFormat="openai-responses", path="/v1/responses")),
     FORMAT_MESSAGE),
    ("model-auth-override-sigv4",
     lambda ns: model(ns, ref(auth={"type": "sigv4", "secretRef": {"name": "aws"}})), AUTH_MESSAGE),
    ("model-path-query", lambda ns: model(ns, ref(path="/openai/chat/completions?api-version=1")),
     PATH_CHARS_MESSAGE),
    ("model-path-space", lambda ns: model(ns, ref(path="/v1 x/chat/completions")), PATH_CHARS_MESSAGE),
    ("model-path-suffix", lambda ns: model(ns, ref(path="/v1/embeddings")), PATH_SUFFIX_MESSAGE),
    ("model-path-suffix-messages", lambda ns: model(ns, ref(apiFormat="messages", path="/v1/chat/completions")),
     PATH_SUFFIX_MESSAGE),
    ("model-path-relative", lambda ns: model(ns, ref(path="v1/chat/completions")), "should match"),
    ("model-nine-providers", lambda ns: model(ns, *(ref(f"p{i}") for i in range(9))), SIZE_MESSAGE),
    ("model-provider-twice", lambda ns: model(ns, ref(), ref(targetModel="gpt-4o-mini")), UNIQUE_MESSAGE),
    ("model-every-weight-zero", lambda ns: model(ns, ref(weight=0), ref("b", weight=0)), WEIGHT_MESSAGE),
    ("model-name-differs", lambda ns: model(ns, ref(), modelName="gpt-4.1"), MODEL_NAME_MESSAGE),
    ("model-no-providers", lambda ns: model(ns) | {"spec": {"externalProviderRefs": []}}, "should have at least 1"),
    ("model-weight-above-100", lambda ns: model(ns, ref(weight=101)), "should be less than or equal to 100"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("make", "expected"), [(m, e) for _, m, e in INVALID], ids=[i for i, _, _ in INVALID])
async def test_what_maasctl_cannot_serve_is_refused_with_the_rule_message(
        make: Callable[[str], dict[str, Any]], expected: str, inference: k8s.CustomObjectsApi, namespace: str) -> None:
    obj = make(namespace)
    obj["metadata"]["name"] = f"{obj['metadata']['name']}-{uuid.uuid4().hex[:6]}"
    with pytest.raises(k8s.ApiException) as caught:
        await create(inference, obj, dry_run="All")
    assert caught.value.status == 422, caught.value.body
    assert expected in error_message(caught.value)


@pytest.mark.integration
async def test_a_model_name_equal_to_the_objects_name_is_accepted(
        inference: k8s.CustomObjectsApi, namespace: str) -> None:
    await create(inference, model(namespace, ref(), modelName="gpt4"), dry_run="All")
    await create(inference, model(namespace, ref(), modelName=""), dry_run="All")
