"""The reference's newer model API, `inference.opendatahub.io/v1alpha1` ExternalProvider and ExternalModel, served
with the reference's schema so that manifests written for it apply unchanged (issue 37).

An ExternalProvider is one provider account: a host name, an auth type with a Secret (key `api-key`), free-form
`config`. An ExternalModel is a client-facing model bound to one or more providers (`externalProviderRefs[]`:
the provider's model name, its API format, the request path, a weight, optional auth and config overrides).

maasctl serves them by conversion: each ExternalModel (with its ExternalProviders) becomes a generated
`maas.opendatahub.io` ExternalModel of the same name (`builders.inference`, `reconcilers.inference`), which the
existing controller publishes, routes, meters and fails over like any other (docs/compatibility.md, "The
reference's newer model API"). The fields are the reference's; the CEL rules below are maasctl's additions and
refuse at admission what maasctl cannot serve as the reference would (request signing, other API formats,
paths it cannot reach, a client-facing name other than the object's). The same rules are checked again by the
conversion (objects stored before the rules existed), with the same messages.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Final, Literal

from pydantic import ConfigDict, Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    KubeObject,
    PrinterColumn,
    Rule,
    model_rules,
)
from maasctl.api._fields import DNS_LABEL_PATTERN, cel_string

INFERENCE_GROUP: Final = "inference.opendatahub.io"
INFERENCE_API_VERSION: Final = f"{INFERENCE_GROUP}/v1alpha1"
PORT_ANNOTATION: Final = "inference.opendatahub.io/port"
"""On an ExternalProvider: the provider's port (default 443), as in the reference."""
TLS_ANNOTATION: Final = "inference.opendatahub.io/tls"
"""On an ExternalProvider: "false" reaches the provider over plain HTTP (default "true"), as in the reference."""
API_KEY_FIELD: Final = "api-key"
"""The Secret key holding a provider's API key (fixed by the reference's API)."""

SUPPORTED_AUTH: Final = ("apikey", "simple")
SUPPORTED_FORMATS: Final = ("openai-chat", "messages")
FORMAT_SUFFIX: Final = {"openai-chat": "/chat/completions", "messages": "/messages"}
"""The end of `path` for each format: what is before it is the provider's base path in maasctl's terms."""
MAX_BINDINGS: Final = 8
"""Providers of one model maasctl serves (the first and 7 fallbacks: `api.externalmodel.MAX_PROVIDERS`)."""
PATH_FORBIDDEN: Final = r"[?#\s\x22\x27\x5c]"

# The refusal messages, shared by the CEL rules (admission) and the conversion (objects stored earlier).
AUTH_MESSAGE: Final = ("auth.type must be apikey or simple: maasctl sends the Secret's api-key in a header and "
                       "signs no request (sigv4 and oauth2 are not supported)")
PROVIDER_MESSAGE: Final = ("spec.provider must be a lowercase DNS label (e.g. openai, anthropic, azure-openai): "
                           "maasctl names providers that way in status, usage records and metrics")
FORMAT_MESSAGE: Final = "externalProviderRefs[].apiFormat must be openai-chat or messages"
PATH_CHARS_MESSAGE: Final = ("externalProviderRefs[].path must be a plain path, without query, fragment, "
                             "whitespace, quotes or backslashes")
PATH_SUFFIX_MESSAGE: Final = ("externalProviderRefs[].path must end in /chat/completions (apiFormat openai-chat) "
                              "or /messages (apiFormat messages): maasctl calls <base>/chat/completions and "
                              "<base>/messages of a provider")
SIZE_MESSAGE: Final = f"maasctl serves at most {MAX_BINDINGS} externalProviderRefs per ExternalModel"
UNIQUE_MESSAGE: Final = ("externalProviderRefs[].ref.name must be unique: one ExternalProvider is bound once per "
                         "model (requests to a provider are told apart by its name)")
WEIGHT_MESSAGE: Final = "at least one externalProviderRefs[] entry must have a weight above 0"
MODEL_NAME_MESSAGE: Final = ("spec.modelName must be unset or equal metadata.name: maasctl publishes the model under "
                             "the ExternalModel's name, as the reference's MaaSModelRef reports it "
                             "(status.resolvedModelAlias)")


class InferencePhase(StrEnum):
    """Lifecycle phase of an ExternalProvider or ExternalModel, as the reference reports it."""

    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


ResourceName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$")]


class SecretRef(CamelModel):
    """A Secret in the object's namespace whose data key `api-key` holds the provider's API key."""

    name: ResourceName = Field(description="Name of the Secret, in the same namespace; its key api-key is used.")


class ProviderAuth(CamelModel):
    """How requests authenticate with the provider."""

    model_config = ConfigDict(json_schema_extra=model_rules(Rule(
        rule=f"self.type in [{', '.join(cel_string(a) for a in SUPPORTED_AUTH)}]", message=AUTH_MESSAGE,
        field_path=".type")))

    type: Literal["apikey", "simple", "sigv4", "oauth2"] = Field(
        description="Auth type: apikey or simple (the API key in a header; maasctl supports these two), sigv4 or "
        "oauth2 (refused by maasctl).")
    secret_ref: SecretRef = Field(description="The Secret holding the provider's API key under api-key.")


ProviderConfig = dict[str, str]


class ExternalProviderSpec(CamelModel):
    """One provider account: where it is and how to authenticate with it."""

    model_config = ConfigDict(json_schema_extra=model_rules(Rule(
        rule=f"self.provider.matches({cel_string(DNS_LABEL_PATTERN)})", message=PROVIDER_MESSAGE,
        field_path=".provider")))

    provider: str = Field(
        min_length=1, max_length=63,
        description="Provider type, e.g. openai, anthropic, azure-openai: decides the header the key goes in "
        "(x-api-key for messages, api-key for azure and azure-openai, Authorization: Bearer otherwise).")
    endpoint: str = Field(
        min_length=1, max_length=253,
        pattern=r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)+$",
        description="Host name of the provider (no scheme or path), e.g. api.openai.com; https on port 443 unless "
        "the annotations inference.opendatahub.io/port and inference.opendatahub.io/tls say otherwise.")
    auth: ProviderAuth = Field(description="How to authenticate with the provider.")
    config: ProviderConfig | None = Field(
        default=None,
        description="Provider configuration as key-value pairs: values for {key} placeholders in the paths of "
        "the models bound to it; authHeaderName / authValuePrefix must agree with the header maasctl uses.")


class InferenceStatus(CamelModel):
    """Observed state, as the reference reports it."""

    phase: InferencePhase | None = Field(
        default=None, description="Pending, Ready (configuration converted and credentials found) or Failed.")
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: the Ready condition.")


class ExternalProvider(KubeObject):
    """A connection to an external LLM provider (endpoint and credentials); ExternalModels bind to it."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="externalproviders",
        short_names=(),
        group=INFERENCE_GROUP,
        printer_columns=(
            PrinterColumn("Provider", ".spec.provider", description="Provider type."),
            PrinterColumn("Endpoint", ".spec.endpoint", description="Provider host name."),
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            AGE_COLUMN,
        ),
    )

    api_version: str = Field(default=INFERENCE_API_VERSION, description="APIVersion of the object.")
    kind: Literal["ExternalProvider"] = Field(default="ExternalProvider", description="Kind of the object.")
    spec: ExternalProviderSpec = Field(description="Provider type, host name, auth and configuration.")
    status: InferenceStatus | None = Field(default=None, description="Observed state, written by maasctl.")


_PATH_RULES = (
    Rule(rule=f"!self.path.matches({cel_string(PATH_FORBIDDEN)})", message=PATH_CHARS_MESSAGE, field_path=".path"),
    Rule(rule=" && ".join(f"(self.apiFormat != {cel_string(fmt)} || self.path.endsWith({cel_string(suffix)}))"
                          for fmt, suffix in FORMAT_SUFFIX.items()),
         message=PATH_SUFFIX_MESSAGE, field_path=".path"),
    Rule(rule=f"self.apiFormat in [{', '.join(cel_string(f) for f in SUPPORTED_FORMATS)}]", message=FORMAT_MESSAGE,
         field_path=".apiFormat"),
)


class ProviderBindingRef(CamelModel):
    """The ExternalProvider of a binding, in the same namespace."""

    name: ResourceName = Field(description="Name of the ExternalProvider, in the same namespace.")


class ExternalProviderRef(CamelModel):
    """One provider of the model: which ExternalProvider, the provider's model name, format and path."""

    model_config = ConfigDict(json_schema_extra=model_rules(*_PATH_RULES))

    ref: ProviderBindingRef = Field(description="The ExternalProvider, in the same namespace.")
    target_model: str = Field(
        min_length=1, max_length=253, description="The provider's model name, e.g. gpt-4o or claude-sonnet-4-5.")
    api_format: str = Field(
        min_length=1, max_length=63,
        description="The provider's API: openai-chat (OpenAI Chat Completions) or messages (Anthropic Messages).")
    path: str = Field(
        min_length=1, max_length=512, pattern=r"^/.*",
        description="The request path at the provider, e.g. /v1/chat/completions or /v1/messages; {key} "
        "placeholders are resolved from the merged config ({model}: targetModel).")
    weight: int = Field(
        default=1, ge=0, le=100,
        description="Share of requests first sent to this provider (0 disables it; default 1).")
    auth: ProviderAuth | None = Field(
        default=None, description="Overrides the ExternalProvider's auth for this binding.")
    config: ProviderConfig | None = Field(
        default=None, description="Overrides keys of the ExternalProvider's config for this binding.")


class InferenceExternalModelSpec(CamelModel):
    """Desired state: the providers serving the model."""

    model_config = ConfigDict(json_schema_extra=model_rules(
        Rule(rule=f"size(self.externalProviderRefs) <= {MAX_BINDINGS}", message=SIZE_MESSAGE,
             field_path=".externalProviderRefs"),
        Rule(rule="self.externalProviderRefs.all(r, self.externalProviderRefs.exists_one(s, s.ref.name == "
                  "r.ref.name))", message=UNIQUE_MESSAGE, field_path=".externalProviderRefs"),
        Rule(rule="self.externalProviderRefs.exists(r, !has(r.weight) || r.weight > 0)", message=WEIGHT_MESSAGE,
             field_path=".externalProviderRefs"),
    ))

    external_provider_refs: list[ExternalProviderRef] = Field(
        min_length=1, max_length=64,
        description="The providers of this model (at most 8 in maasctl): the first is tried first, the others "
        "by weight, with failover (docs/providers.md).")
    model_name: str | None = Field(
        default=None, max_length=253,
        description="Client-facing model name; maasctl accepts it only unset or equal to metadata.name.")


class InferenceExternalModelStatus(InferenceStatus):
    """Observed state, as the reference reports it."""

    http_route_name: str | None = Field(
        default=None, max_length=253,
        description="The HTTPRoute serving this model: the route of the first MaaSModelRef publishing it.")


class InferenceExternalModel(KubeObject):
    """A client-facing model served by one or more ExternalProviders; publish it with a MaaSModelRef of kind
    ExternalModel."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="externalmodels",
        short_names=(),
        group=INFERENCE_GROUP,
        kind="ExternalModel",
        printer_columns=(PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."), AGE_COLUMN),
        root_rules=(Rule(
            rule="!has(self.spec.modelName) || self.spec.modelName == '' || self.spec.modelName == self.metadata.name",
            message=MODEL_NAME_MESSAGE, field_path=".spec.modelName"),),
    )

    api_version: str = Field(default=INFERENCE_API_VERSION, description="APIVersion of the object.")
    kind: Literal["ExternalModel"] = Field(default="ExternalModel", description="Kind of the object.")
    spec: InferenceExternalModelSpec = Field(description="The providers serving the model.")
    status: InferenceExternalModelStatus | None = Field(default=None, description="Observed state, written by maasctl.")
