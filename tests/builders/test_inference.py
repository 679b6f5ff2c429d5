"""The conversion of the reference's inference.opendatahub.io ExternalModel + ExternalProviders into the
maas.opendatahub.io ExternalModel maasctl serves: every field, every entry left out (as the reference leaves
it out) and every refusal (what maasctl would serve differently)."""

from __future__ import annotations

from typing import Any

import pytest

from maasctl.api import dump, parse
from maasctl.api.inference import (
    AUTH_MESSAGE,
    FORMAT_MESSAGE,
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
from maasctl.builders.inference import (
    GENERATED_FROM_LABEL,
    Conversion,
    ProviderView,
    convert,
    generated_external_model,
    provider_problem,
    reference_key_header,
    resolve_path,
)

NS = "llm"


def provider(name: str, kind: str = "openai", endpoint: str = "api.openai.com", *, auth: str = "simple",
             secret: str | None = None, config: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> ExternalProvider:
    spec: dict[str, Any] = {"provider": kind, "endpoint": endpoint,
                            "auth": {"type": auth, "secretRef": {"name": secret or f"{name}-key"}}}
    if config is not None:
        spec["config"] = config
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return parse(ExternalProvider, {"apiVersion": "inference.opendatahub.io/v1alpha1", "kind": "ExternalProvider",
                                    "metadata": meta, "spec": spec})


def binding(ref: str, target: str = "gpt-4o", fmt: str = "openai-chat", path: str | None = None,
            **extra: Any) -> dict[str, Any]:
    default = "/v1/chat/completions" if fmt == "openai-chat" else "/v1/messages"
    return {"ref": {"name": ref}, "targetModel": target, "apiFormat": fmt, "path": path or default, **extra}


def model(*refs: dict[str, Any], name: str = "chat", **spec: Any) -> InferenceExternalModel:
    return parse(InferenceExternalModel, {
        "apiVersion": "inference.opendatahub.io/v1alpha1", "kind": "ExternalModel",
        "metadata": {"name": name, "namespace": NS, "uid": "u-1"},
        "spec": {"externalProviderRefs": list(refs), **spec}})


def ready(*eps: ExternalProvider) -> dict[str, ProviderView]:
    return {str(ep.metadata.name): ProviderView(ep, ready=True, phase="Ready") for ep in eps}


def served(conv: Conversion) -> dict[str, Any]:
    assert conv.refused is None, conv.refused
    assert conv.spec is not None, conv.skipped
    return dump(conv.spec)


# -- every field ------------------------------------------------------------------------------------------------


def test_one_provider_is_the_external_models_own_provider() -> None:
    conv = convert(model(binding("openai")), ready(provider("openai")))
    assert served(conv) == {"provider": "openai", "endpoint": "https://api.openai.com/v1", "targetModel": "gpt-4o",
                            "apiFormat": "openai-chat", "credentialRef": {"name": "openai-key", "key": "api-key"}}
    assert conv.served == ("openai",) and conv.skipped == ()


def test_a_messages_provider_keeps_its_format_and_base_path() -> None:
    conv = convert(model(binding("claude", "claude-sonnet-4-5", "messages")),
                   ready(provider("claude", "anthropic", "api.anthropic.com")))
    spec = served(conv)
    assert (spec["provider"], spec["endpoint"], spec["apiFormat"]) == (
        "anthropic", "https://api.anthropic.com/v1", "messages")


@pytest.mark.parametrize(("path", "endpoint"), [
    ("/v1/chat/completions", "https://api.openai.com/v1"),
    ("/openai/v1/chat/completions", "https://api.openai.com/openai/v1"),
    ("/chat/completions", "https://api.openai.com"),
    ("/maas-default-gateway/v1/chat/completions", "https://api.openai.com/maas-default-gateway/v1"),
])
def test_the_base_path_is_what_comes_before_the_formats_path(path: str, endpoint: str) -> None:
    assert served(convert(model(binding("openai", path=path)), ready(provider("openai"))))["endpoint"] == endpoint


@pytest.mark.parametrize(("annotations", "endpoint"), [
    ({}, "https://api.openai.com/v1"),
    ({"inference.opendatahub.io/port": "8443"}, "https://api.openai.com:8443/v1"),
    ({"inference.opendatahub.io/tls": "false"}, "http://api.openai.com:443/v1"),  # the reference's default port
    ({"inference.opendatahub.io/tls": "false", "inference.opendatahub.io/port": "80"}, "http://api.openai.com/v1"),
    ({"inference.opendatahub.io/tls": "true", "inference.opendatahub.io/port": "443"}, "https://api.openai.com/v1"),
    ({"maas.opendatahub.io/port": "8000"}, "https://api.openai.com/v1"),  # the older kind's annotations: not read
])
def test_port_and_tls_come_from_the_providers_annotations(annotations: dict[str, str], endpoint: str) -> None:
    ep = provider("openai", annotations=annotations)
    assert served(convert(model(binding("openai")), ready(ep)))["endpoint"] == endpoint


def test_the_endpoint_host_is_lowercased() -> None:
    ep = provider("openai", endpoint="API.OpenAI.com")
    assert served(convert(model(binding("openai")), ready(ep)))["endpoint"] == "https://api.openai.com/v1"


def test_a_bindings_auth_overrides_the_providers_secret() -> None:
    ref = binding("openai", auth={"type": "apikey", "secretRef": {"name": "team-key"}})
    assert served(convert(model(ref), ready(provider("openai"))))["credentialRef"] == {
        "name": "team-key", "key": "api-key"}


def test_several_providers_are_fallbacks_named_after_their_external_provider_and_weighted() -> None:
    eps = ready(provider("openai", secret="openai-credentials"),
                provider("azure", "azure-openai", "my-resource.openai.azure.com", secret="azure-credentials"),
                provider("claude", "anthropic", "api.anthropic.com"))
    conv = convert(model(binding("openai", weight=80), binding("azure", path="/openai/v1/chat/completions", weight=20),
                         binding("claude", "claude-sonnet-4-5", "messages", weight=0)), eps)
    assert served(conv) == {
        "provider": "openai", "endpoint": "https://api.openai.com/v1", "targetModel": "gpt-4o",
        "apiFormat": "openai-chat", "credentialRef": {"name": "openai-credentials", "key": "api-key"}, "weight": 80,
        "providerSelection": "Weighted",
        "fallbacks": [
            {"name": "azure", "provider": "azure-openai", "endpoint": "https://my-resource.openai.azure.com/openai/v1",
             "targetModel": "gpt-4o", "apiFormat": "openai-chat",
             "credentialRef": {"name": "azure-credentials", "key": "api-key"}, "weight": 20},
            {"name": "claude", "provider": "anthropic", "endpoint": "https://api.anthropic.com/v1",
             "targetModel": "claude-sonnet-4-5", "apiFormat": "messages",
             "credentialRef": {"name": "claude-key", "key": "api-key"}, "weight": 0},
        ]}
    assert conv.served == ("openai", "azure", "claude")


def test_the_weight_defaults_to_one_as_in_the_reference() -> None:
    spec = served(convert(model(binding("a"), binding("b")), ready(provider("a"), provider("b"))))
    assert spec["weight"] == 1 and spec["fallbacks"][0]["weight"] == 1


def test_placeholders_are_resolved_from_the_merged_config() -> None:
    ep = provider("vertex", "vertex-openai", "us-central1-aiplatform.googleapis.com",
                  config={"project": "my-project", "location": "us-central1", "endpoint": "default"})
    ref = binding("vertex", "gemini-2.5-pro",
                  path="/v1/projects/{project}/locations/{location}/endpoints/{endpoint}/chat/completions",
                  config={"endpoint": "openapi"})
    assert served(convert(model(ref), ready(ep)))["endpoint"] == (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/us-central1/endpoints/openapi")


def test_resolve_path_reserves_model_for_the_target_model_unless_config_names_it() -> None:
    assert resolve_path("/m/{model}/chat/completions", {}, "gpt-4o") == "/m/gpt-4o/chat/completions"
    assert resolve_path("/m/{model}/chat/completions", {"model": "x"}, "gpt-4o") == "/m/x/chat/completions"
    with pytest.raises(ValueError, match=r"unresolved placeholders \[project location\]"):
        resolve_path("/{project}/{location}/chat/completions", {}, "gpt-4o")


def test_the_generated_object_is_owned_by_its_source_and_labelled() -> None:
    spec = convert(model(binding("openai")), ready(provider("openai"))).spec
    assert spec is not None
    obj = generated_external_model("chat", NS, "u-1", spec)
    assert obj["apiVersion"] == "maas.opendatahub.io/v1alpha1" and obj["kind"] == "ExternalModel"
    assert obj["metadata"]["name"] == "chat" and obj["metadata"]["namespace"] == NS
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "maas-controller",
                                         GENERATED_FROM_LABEL: "inference.opendatahub.io"}
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "inference.opendatahub.io/v1alpha1", "kind": "ExternalModel", "name": "chat", "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True}]
    assert obj["spec"] == dump(spec)


# -- the key header: the reference's and maasctl's must agree --------------------------------------------------


@pytest.mark.parametrize(("kind", "config", "expected"), [
    ("openai", {}, ("authorization", "Bearer ")),
    ("anthropic", {}, ("x-api-key", "")),
    ("azure", {}, ("api-key", "")),
    ("azure-openai", {}, ("api-key", "")),
    ("vllm", {"authHeaderName": "X-Key"}, ("x-key", "")),
    ("vllm", {"authHeaderName": "Authorization", "authValuePrefix": "Token "}, ("authorization", "Token ")),
    ("openai", {"authValuePrefix": "Token "}, ("authorization", "Bearer ")),  # a prefix alone changes nothing
])
def test_reference_key_header(kind: str, config: dict[str, str], expected: tuple[str, str]) -> None:
    assert reference_key_header(kind, config) == expected


@pytest.mark.parametrize(("kind", "fmt", "config"), [
    ("anthropic", "messages", {}),
    ("azure-openai", "openai-chat", {}),
    ("minimax", "messages", {"authHeaderName": "x-api-key"}),  # a Messages provider of another type, told so
    ("anthropic", "openai-chat", {"authHeaderName": "Authorization", "authValuePrefix": "Bearer "}),
])
def test_a_key_header_both_send_alike_is_served(kind: str, fmt: str, config: dict[str, str]) -> None:
    ep = provider("p", kind, config=config)
    assert served(convert(model(binding("p", fmt=fmt)), ready(ep)))["provider"] == kind


@pytest.mark.parametrize(("kind", "fmt", "provider_config", "binding_config"), [
    ("anthropic", "openai-chat", {}, {}),  # the reference: x-api-key; maasctl: Authorization: Bearer
    ("minimax", "messages", {}, {}),  # the reference: Authorization: Bearer; maasctl: x-api-key
    ("openai", "openai-chat", {"authHeaderName": "X-Key"}, {}),
    ("openai", "openai-chat", {}, {"authHeaderName": "api-key"}),  # a binding's config overrides
    ("anthropic", "messages", {"authValuePrefix": "Bearer "}, {}),
])
def test_a_key_header_maasctl_would_send_differently_is_refused(
        kind: str, fmt: str, provider_config: dict[str, str], binding_config: dict[str, str]) -> None:
    ep = provider("p", kind, config=provider_config)
    conv = convert(model(binding("p", fmt=fmt, config=binding_config)), ready(ep))
    assert conv.spec is None and conv.refused is not None
    assert "the reference sends the key as" in conv.refused and "externalProviderRefs[0] (p)" in conv.refused


# -- left out, as the reference leaves them out ----------------------------------------------------------------


def test_a_missing_or_unready_provider_is_left_out_and_the_others_serve() -> None:
    eps = {**ready(provider("b")), "c": ProviderView(provider("c"), ready=False, phase="Failed")}
    conv = convert(model(binding("a"), binding("b"), binding("c")), eps)
    spec = served(conv)
    assert spec["provider"] == "openai" and "fallbacks" not in spec and conv.served == ("b",)
    assert conv.skipped == ("ExternalProvider 'a' not found in namespace 'llm'",
                            "ExternalProvider 'c' is not ready (phase: Failed)")


def test_a_provider_maasctl_cannot_use_is_left_out_with_its_reason() -> None:
    bad = provider("a", annotations={"inference.opendatahub.io/port": "99999"})
    conv = convert(model(binding("a"), binding("b")), ready(bad, provider("b")))
    assert conv.served == ("b",)
    assert conv.skipped == ("ExternalProvider 'a': invalid inference.opendatahub.io/port annotation '99999': must "
                            "be an integer between 1 and 65535",)


def test_a_path_with_an_unresolved_placeholder_is_left_out() -> None:
    conv = convert(model(binding("a", path="/{project}/chat/completions"), binding("b")),
                   ready(provider("a"), provider("b")))
    assert conv.served == ("b",) and "unresolved placeholders [project]" in conv.skipped[0]


def test_nothing_servable_is_no_spec_and_no_refusal() -> None:
    conv = convert(model(binding("a")), {})
    assert conv.spec is None and conv.refused is None
    assert conv.skipped[-1] == "no ExternalProvider with a weight above 0 can serve the model"


def test_only_weight_zero_providers_left_is_nothing_servable() -> None:
    conv = convert(model(binding("a"), binding("b", weight=0)), ready(provider("b")))
    assert conv.spec is None and conv.refused is None


# -- refused: never served differently -------------------------------------------------------------------------


def refused(conv: Conversion) -> str:
    assert conv.spec is None and conv.refused is not None, conv
    return conv.refused


def test_a_model_name_other_than_the_objects_is_refused() -> None:
    assert refused(convert(model(binding("a"), modelName="claude.sonnet"), ready(provider("a")))) == MODEL_NAME_MESSAGE
    assert served(convert(model(binding("a"), modelName="chat"), ready(provider("a"))))


def test_more_than_eight_providers_are_refused() -> None:
    eps = ready(*(provider(f"p{i}") for i in range(9)))
    assert refused(convert(model(*(binding(f"p{i}") for i in range(9))), eps)) == SIZE_MESSAGE


def test_one_provider_bound_twice_is_refused() -> None:
    assert refused(convert(model(binding("a"), binding("a", "gpt-4o-mini")), ready(provider("a")))) == UNIQUE_MESSAGE


def test_every_weight_zero_is_refused() -> None:
    assert refused(convert(model(binding("a", weight=0)), ready(provider("a")))) == WEIGHT_MESSAGE


@pytest.mark.parametrize("fmt", ["vertex-messages", "openai-responses", "bedrock", "OpenAI-Chat"])
def test_another_api_format_is_refused(fmt: str) -> None:
    conv = convert(model(binding("a", fmt=fmt, path="/v1/chat/completions")), ready(provider("a")))
    assert FORMAT_MESSAGE in refused(conv)


@pytest.mark.parametrize("auth", ["sigv4", "oauth2"])
def test_a_signed_auth_override_is_refused(auth: str) -> None:
    ref = binding("a", auth={"type": auth, "secretRef": {"name": "aws"}})
    assert AUTH_MESSAGE in refused(convert(model(ref), ready(provider("a"))))


@pytest.mark.parametrize("path", [
    "/openai/deployments/x/chat/completions?api-version=2024-02-01", "/v1/chat/completions#x", "/v1 /chat/completions",
    '/v1"/chat/completions', "/v1\\/chat/completions", "/v1/chat/completions\n"])
def test_a_path_with_a_query_or_odd_characters_is_refused(path: str) -> None:
    assert PATH_CHARS_MESSAGE in refused(convert(model(binding("a", path=path)), ready(provider("a"))))


@pytest.mark.parametrize(("fmt", "path"), [
    ("openai-chat", "/v1/completions"), ("openai-chat", "/v1/responses"), ("openai-chat", "/v1/messages"),
    ("messages", "/v1/chat/completions"), ("messages", "/v1/projects/p/models/claude:rawPredict"),
    ("openai-chat", "/v1/chat/completions/")])
def test_a_path_maasctl_cannot_reach_as_base_plus_the_formats_path_is_refused(fmt: str, path: str) -> None:
    assert PATH_SUFFIX_MESSAGE in refused(convert(model(binding("a", fmt=fmt, path=path)), ready(provider("a"))))


def test_a_literal_path_is_refused_even_while_its_provider_is_missing() -> None:
    assert PATH_SUFFIX_MESSAGE in refused(convert(model(binding("a", path="/v1/embeddings")), {}))


def test_a_path_whose_placeholders_resolve_to_something_unservable_is_refused() -> None:
    ep = provider("a", config={"op": "completions?x=1"})
    assert PATH_CHARS_MESSAGE in refused(convert(model(binding("a", path="/v1/chat/{op}")), ready(ep)))
    ep = provider("a", config={"op": "embeddings"})
    assert PATH_SUFFIX_MESSAGE in refused(convert(model(binding("a", path="/v1/{op}")), ready(ep)))


def test_a_further_provider_named_as_the_first_providers_type_is_refused() -> None:
    eps = ready(provider("primary", "openai"), provider("openai", "openai"))
    assert "differ from the first provider's type 'openai'" in refused(
        convert(model(binding("primary"), binding("openai")), eps))


def test_a_further_provider_with_a_name_too_long_for_maasctl_is_refused() -> None:
    long = "p" * 64
    eps = ready(provider("a"), provider(long))
    assert "at most 63 characters" in refused(convert(model(binding("a"), binding(long)), eps))
    assert served(convert(model(binding(long)), eps))  # the first provider is named by its type


@pytest.mark.parametrize("target", ['gpt"4', "gpt\\4", "gpt\n4"])
def test_a_target_model_maasctl_refuses_in_its_own_external_model_is_refused(target: str) -> None:
    assert "targetModel" in refused(convert(model(binding("a", target)), ready(provider("a"))))


# -- providers maasctl cannot use at all -----------------------------------------------------------------------


@pytest.mark.parametrize(("ep", "problem"), [
    (provider("a", auth="sigv4"), AUTH_MESSAGE),
    (provider("a", auth="oauth2"), AUTH_MESSAGE),
    (provider("a", "OpenAI"), PROVIDER_MESSAGE),
    (provider("a", "aws bedrock"), PROVIDER_MESSAGE),
    (provider("a", annotations={"inference.opendatahub.io/port": "0"}), "invalid inference.opendatahub.io/port"),
    (provider("a", annotations={"inference.opendatahub.io/port": "\uff18\uff10"}),  # full-width digits
     "invalid inference.opendatahub.io/port"),
    (provider("a", annotations={"inference.opendatahub.io/tls": "True"}), "invalid inference.opendatahub.io/tls"),
    (provider("a", auth="apikey", annotations={"inference.opendatahub.io/tls": "false"}), "plaintext transport"),
])
def test_provider_problem(ep: ExternalProvider, problem: str) -> None:
    found = provider_problem(ep)
    assert found is not None and problem in found


@pytest.mark.parametrize("ep", [
    provider("a"), provider("a", auth="apikey"), provider("a", "aws-bedrock"),
    provider("a", auth="simple", annotations={"inference.opendatahub.io/tls": "false"}),  # as the reference
])
def test_providers_maasctl_can_use(ep: ExternalProvider) -> None:
    assert provider_problem(ep) is None
