"""ExternalModel: a model served by a provider outside the cluster, speaking the OpenAI API or Anthropic's
Messages API (`apiFormat`; the data plane translates, docs/providers.md), optionally with further providers
the data plane fails over to (`fallbacks`: docs/providers.md, "Several providers for one model")."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    KubeObject,
    KubeSchema,
    PrinterColumn,
    Rule,
    model_rules,
)
from maasctl.api._fields import DNS_LABEL_PATTERN, ObjectName, ProviderEndpoint, safe

DEFAULT_API_KEY_FIELD = "api-key"
PORT_ANNOTATION = "maas.opendatahub.io/port"
"""Host-form endpoints: the provider's port (default 443 with TLS, 80 without), as in the reference."""
TLS_ANNOTATION = "maas.opendatahub.io/tls"
"""Host-form endpoints: "false" reaches the provider over plain HTTP (default "true"), as in the reference."""
GATEWAY_ANNOTATION = "maas.opendatahub.io/gateway"
"""On a MaaSModelRef of an ExternalModel: `namespace/name` of the managed Gateway its generated route attaches
to (default: the controller's default Gateway; docs/tenant-gateways.md)."""


ApiFormat = Literal["openai-chat", "messages"]
"""The provider's wire API: OpenAI Chat Completions (and the rest of the OpenAI API), or Anthropic's Messages."""
ProviderSelection = Literal["Ordered", "Weighted"]
"""How the first provider of a request is chosen among several: in the order written, or at random by weight."""
MAX_PROVIDERS = 8
"""Providers of one ExternalModel at most (the first and 7 fallbacks): also the most attempts of one request."""
MAX_WEIGHT = 100
Weight = Annotated[int, Field(ge=0, le=MAX_WEIGHT)]


class ExternalModelPhase(StrEnum):
    """Lifecycle phase of an ExternalModel."""

    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class SecretKeyRef(CamelModel):
    """A key of a Secret in the ExternalModel's namespace."""

    name: ObjectName = Field(description="Name of the Secret, in the same namespace as the ExternalModel.")
    key: str = Field(
        default=DEFAULT_API_KEY_FIELD,
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the Secret's data that holds the upstream API key.",
    )


class ProviderBinding(CamelModel):
    """A further provider of the same model: its own endpoint, key, API format and provider model name."""

    name: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Names this provider in status, usage records and metrics (lowercase DNS label, unique "
        "within the ExternalModel and different from spec.provider, the first provider's name).",
    )
    provider: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Provider identifier, e.g. openai, anthropic, azure-openai or vllm (decides how the key is "
        "sent, as spec.provider).",
    )
    endpoint: ProviderEndpoint = Field(
        description="Provider base URL including its API base path (https://api.example.com/v1), or a host name "
        "alone (https on port 443, base path /v1: the port and TLS annotations apply to spec.endpoint only)."
    )
    target_model: Annotated[str, Field(min_length=1, max_length=253), safe("fallbacks.targetModel")] = Field(
        description="Model name this provider expects in the request body's model field."
    )
    api_format: ApiFormat | None = Field(
        default=None, description="This provider's API (absent: openai-chat): openai-chat or messages."
    )
    credential_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key (same namespace) holding this provider's API key; absent: none."
    )
    weight: Weight | None = Field(
        default=None,
        description="Share of first attempts with providerSelection Weighted (absent: 1); 0 never tries this "
        "provider.",
    )


_NAME_DIFFERS = Rule(
    rule="!has(self.fallbacks) || self.fallbacks.all(f, f.name != self.provider)",
    message="fallbacks[].name must differ from spec.provider, which names the first provider",
)
_SOME_WEIGHT = Rule(
    rule="(has(self.weight) ? self.weight : 1) > 0 || (has(self.fallbacks) && "
    "self.fallbacks.exists(f, (has(f.weight) ? f.weight : 1) > 0))",
    message="at least one provider must have a weight above 0 (weight 0 never tries a provider)",
)
_ATTEMPTS_BOUND = Rule(
    rule="!has(self.maxAttempts) || self.maxAttempts <= 1 + (has(self.fallbacks) ? size(self.fallbacks) : 0)",
    message="maxAttempts must not exceed the number of providers (1 + the fallbacks)",
)


class ExternalModelSpec(CamelModel):
    """Desired state of an ExternalModel.

    Several ExternalModels may name the same endpoint and the same Secret: each is a separately published and
    subscribable model name, and the credential is referenced, never copied. `fallbacks` names further
    providers of the same model (docs/providers.md, "Several providers for one model").
    """

    model_config = ConfigDict(json_schema_extra=model_rules(_NAME_DIFFERS, _SOME_WEIGHT, _ATTEMPTS_BOUND))

    provider: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Provider identifier, e.g. openai, anthropic or vllm (lowercase DNS label).",
    )
    endpoint: ProviderEndpoint = Field(
        description="Provider's OpenAI-compatible base URL including its API base path, e.g. "
        "https://api.example.com/v1 (requests are sent to <endpoint>/chat/completions and similar), or, as in "
        "the reference MaaS, a host name alone such as api.openai.com: https on port 443 with base path /v1 "
        "unless the annotations maas.opendatahub.io/port and maas.opendatahub.io/tls (\"false\") say otherwise."
    )
    target_model: Annotated[str, Field(min_length=1, max_length=253), safe("targetModel")] = Field(
        description="Model name the provider expects in the request body's model field."
    )
    api_format: ApiFormat | None = Field(
        default=None,
        description="The provider's API (absent: openai-chat): openai-chat (OpenAI-compatible: chat completions, "
        "completions, "
        "embeddings, responses) or messages (Anthropic's Messages API: the gateway serves OpenAI chat "
        "completions for it, translating requests, answers, streams and errors; its key goes in x-api-key "
        "with anthropic-version). Azure OpenAI (provider azure or azure-openai) takes its key in api-key.",
    )
    credential_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the provider API key that the gateway injects upstream; absent means "
        "the provider needs no credentials. Consumers never see this key.",
    )
    weight: Weight | None = Field(
        default=None,
        description="With fallbacks and providerSelection Weighted: this (the first) provider's share of first "
        "attempts (absent: 1); 0 never tries it.",
    )
    fallbacks: Annotated[
        list[ProviderBinding],
        Field(max_length=MAX_PROVIDERS - 1),
        KubeSchema(list_type="map", list_map_keys=("name",)),
    ] | None = Field(
        default=None,
        description="Further providers of this model (at most 7). A request goes to the first provider and, on "
        "a connection failure, a 5xx or a 429 before any byte of the answer reached the client, to the next; "
        "each has its own endpoint, key, API format and model name.",
    )
    provider_selection: ProviderSelection | None = Field(
        default=None,
        description="With fallbacks: Ordered (absent: spec.provider first, then the fallbacks in order) or "
        "Weighted (the first attempt drawn by weight, the next ones by weight among the rest).",
    )
    max_attempts: Annotated[int, Field(ge=1, le=MAX_PROVIDERS)] | None = Field(
        default=None, description="Attempts of one request at most (absent: every provider with a weight)."
    )


class ProviderStatus(CamelModel):
    """One provider of the model as the controller sees it (configuration, credential; health: metrics)."""

    name: str = Field(max_length=63, description="spec.provider for the first provider, else fallbacks[].name.")
    ready: bool = Field(description="The endpoint is usable and the credential (if any) is present.")
    reason: str = Field(max_length=64, description="Ready, InvalidEndpoint, CredentialNotFound or "
                        "CredentialKeyMissing.")
    message: str = Field(default="", max_length=1024, description="Why, in words.")


class ExternalModelStatus(CamelModel):
    """Observed state of an ExternalModel."""

    phase: ExternalModelPhase | None = Field(default=None, description="Pending, Ready or Failed.")
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Ready and route/credential conditions."
    )
    providers: list[ProviderStatus] | None = Field(
        default=None, max_length=MAX_PROVIDERS,
        description="With fallbacks: each provider's configuration and credential, in spec order.",
    )


class ExternalModel(KubeObject):
    """A model served by an OpenAI-compatible provider outside the cluster; publish it with a MaaSModelRef."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="externalmodels",
        short_names=("extmodel",),
        printer_columns=(
            PrinterColumn("Provider", ".spec.provider", description="Provider identifier."),
            PrinterColumn("Target Model", ".spec.targetModel", description="Provider's model name."),
            PrinterColumn("Endpoint", ".spec.endpoint", description="Provider base URL or host name."),
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            AGE_COLUMN,
        ),
    )

    kind: Literal["ExternalModel"] = Field(default="ExternalModel", description="Kind of the object.")
    spec: ExternalModelSpec = Field(description="Provider, endpoint, model name and credential.")
    status: ExternalModelStatus | None = Field(default=None, description="Observed state, written by maasctl.")
