"""MaaSModelRef: publishes one model (an LLMInferenceService or an ExternalModel) through MaaS."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    KubeObject,
    KubeSchema,
    PrinterColumn,
)
from maasctl.api._fields import EndpointOverride, NamespaceName, ObjectName


class ModelKind(StrEnum):
    """Kind of the object that serves a published model."""

    LLM_INFERENCE_SERVICE = "LLMInferenceService"
    EXTERNAL_MODEL = "ExternalModel"


class ModelPhase(StrEnum):
    """Lifecycle phase of a MaaSModelRef."""

    PENDING = "Pending"
    READY = "Ready"
    UNHEALTHY = "Unhealthy"
    FAILED = "Failed"
    INVALID = "Invalid"


class ModelTarget(CamelModel):
    """The object serving the model; it lives in the MaaSModelRef's namespace."""

    kind: ModelKind = Field(
        description="Kind of the serving object: LLMInferenceService (KServe) or ExternalModel "
        "(maas.opendatahub.io, a provider outside the cluster)."
    )
    name: ObjectName = Field(description="Name of the serving object, in the same namespace.")


MAX_COMPLETION_TOKENS = 1_000_000
"""The largest per-model completion ceiling (`contract.labels.MAX_COMPLETION_CEILING`)."""
CompletionTokens = Annotated[int, Field(ge=1, le=MAX_COMPLETION_TOKENS), KubeSchema(fmt="int32")]


class MaaSModelRefSpec(CamelModel):
    """Desired state of a MaaSModelRef."""

    model_ref: ModelTarget = Field(description="The LLMInferenceService or ExternalModel to publish.")
    endpoint_override: EndpointOverride | None = Field(
        default=None,
        description="URL reported in status.endpoint instead of the discovered one, e.g. when clients reach "
        "the gateway through an external load balancer.",
    )
    max_completion_tokens: CompletionTokens | None = Field(
        default=None,
        description="Most completion tokens one request may generate (1-1000000). A token rate limit reserves "
        "the prompt estimate plus the smaller of this and the request's own max_tokens / max_completion_tokens "
        "/ max_output_tokens, and the data plane sends max_tokens with this value upstream when the request "
        "states none (and lowers a larger one), so the provider cannot exceed what was reserved. Unset: 4096 "
        "is reserved for a request stating no bound and the request is forwarded unchanged.",
    )


class ObjectRef(CamelModel):
    """A namespaced object named in status."""

    name: str = Field(max_length=253, description="Name of the object.")
    namespace: NamespaceName = Field(description="Namespace of the object.")


RefList = Annotated[list[ObjectRef], Field(max_length=16)]


class MaaSModelRefStatus(CamelModel):
    """Observed state of a MaaSModelRef."""

    phase: ModelPhase | None = Field(
        default=None,
        description="Pending (not yet governed or routed), Ready, Unhealthy (backend not ready), Failed or Invalid.",
    )
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    endpoint: str | None = Field(
        default=None, max_length=2048, description="URL clients use to call the model; set only when Ready."
    )
    resolved_model_alias: str | None = Field(
        default=None,
        max_length=253,
        description="Model name clients send in the request's model field (LLMInferenceService model name or "
        "the ExternalModel's name).",
    )
    http_routes: RefList | None = Field(default=None, description="HTTPRoutes through which the model is served.")
    gateways: RefList | None = Field(default=None, description="Gateways the model's HTTPRoutes are attached to.")
    http_route_name: str | None = Field(
        default=None, max_length=253, description="Name of the model's HTTPRoute (the reference's field; the "
        "first of httpRoutes)."
    )
    http_route_namespace: str | None = Field(default=None, max_length=63, description="Namespace of that HTTPRoute.")
    http_route_gateway_name: str | None = Field(
        default=None, max_length=253, description="Gateway that HTTPRoute is attached to (the first of gateways)."
    )
    http_route_gateway_namespace: str | None = Field(
        default=None, max_length=63, description="Namespace of that Gateway."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Ready and kind-specific conditions."
    )


class MaaSModelRef(KubeObject):
    """Publishes one model to Models-as-a-Service. Lives in the namespace of the model it references."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="maasmodelrefs",
        short_names=("maasmodel", "mmr"),
        printer_columns=(
            PrinterColumn("Kind", ".spec.modelRef.kind", description="Kind of the serving object."),
            PrinterColumn("Target", ".spec.modelRef.name", description="Name of the serving object."),
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            PrinterColumn("Endpoint", ".status.endpoint", description="URL of the model."),
            PrinterColumn("HTTPRoute", ".status.httpRoutes[*].name", description="Serving HTTPRoutes.", priority=1),
            PrinterColumn("Gateway", ".status.gateways[*].name", description="Gateways of the routes.", priority=1),
            AGE_COLUMN,
        ),
    )

    kind: Literal["MaaSModelRef"] = Field(default="MaaSModelRef", description="Kind of the object.")
    spec: MaaSModelRefSpec = Field(description="Which model to publish.")
    status: MaaSModelRefStatus | None = Field(default=None, description="Observed state, written by maasctl.")
