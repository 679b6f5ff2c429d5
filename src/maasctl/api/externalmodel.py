"""ExternalModel: a model served by a provider outside the cluster, speaking the OpenAI API or Anthropic's
Messages API (`apiFormat`; the data plane translates, docs/providers.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from maasctl.api._base import AGE_COLUMN, CamelModel, Conditions, CrdInfo, Generation, KubeObject, PrinterColumn
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


class ExternalModelSpec(CamelModel):
    """Desired state of an ExternalModel.

    Several ExternalModels may name the same endpoint and the same Secret: each is a separately published and
    subscribable model name, and the credential is referenced, never copied.
    """

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


class ExternalModelStatus(CamelModel):
    """Observed state of an ExternalModel."""

    phase: ExternalModelPhase | None = Field(default=None, description="Pending, Ready or Failed.")
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Ready and route/credential conditions."
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
