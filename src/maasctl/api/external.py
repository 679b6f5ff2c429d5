"""Light, permissive models of the third-party objects the reconcilers read.

Only the fields we use are typed; everything else is kept (``extra="allow"``) so a newer upstream schema never
breaks parsing. These models are read-only views: builders emit plain dicts, not these classes.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from maasctl.api._base import ExternalModelBase, ObjectMeta


class ObjectReference(ExternalModelBase):
    """A reference as written by other controllers: all parts optional."""

    group: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None


class ObservedCondition(ExternalModelBase):
    """A condition written by another controller (metav1 or Knative style)."""

    type: str
    status: str = "Unknown"
    reason: str | None = None
    message: str | None = None
    observed_generation: int | None = None
    last_transition_time: str | None = None


def _condition_is_true(conditions: list[ObservedCondition] | None, type_: str) -> bool:
    return any(c.type == type_ and c.status == "True" for c in conditions or [])


# --- KServe LLMInferenceService (serving.kserve.io/v1alpha2, status.router from v0.19) ---------------------


class SchedulerStatus(ExternalModelBase):
    """``status.router.scheduler``: the InferencePool and EPP Service the router uses."""

    inference_pool: ObjectReference | None = None
    service: ObjectReference | None = None


class RouterGatewayStatus(ObjectReference):
    """``status.router.gateways[]``: a Gateway and the HTTPRoutes attached to it."""

    http_routes: list[ObjectReference] | None = None


class RouterStatus(ExternalModelBase):
    """``status.router``."""

    gateways: list[RouterGatewayStatus] | None = None
    scheduler: SchedulerStatus | None = None


class AddressModel(ExternalModelBase):
    """A model name served at an address."""

    name: str | None = None


class Address(ExternalModelBase):
    """``status.addresses[]``."""

    name: str | None = None
    url: str | None = None
    models: list[AddressModel] | None = None


class LLMInferenceServiceStatus(ExternalModelBase):
    """The parts of LLMInferenceService status the MaaS reconcilers read."""

    url: str | None = None
    addresses: list[Address] | None = None
    router: RouterStatus | None = None
    conditions: list[ObservedCondition] | None = None
    observed_generation: int | None = None


class LLMInferenceService(ExternalModelBase):
    """KServe LLMInferenceService (read only)."""

    api_version: str = "serving.kserve.io/v1alpha2"
    kind: str = "LLMInferenceService"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None
    status: LLMInferenceServiceStatus | None = None

    @property
    def ready(self) -> bool:
        """True when KServe reports the top-level Ready condition as True."""
        return self.status is not None and _condition_is_true(self.status.conditions, "Ready")

    @property
    def inference_pool(self) -> ObjectReference | None:
        """The InferencePool from ``status.router.scheduler.inferencePool`` (None before KServe v0.19)."""
        router = self.status.router if self.status else None
        return router.scheduler.inference_pool if router and router.scheduler else None

    @property
    def http_routes(self) -> list[ObjectReference]:
        """HTTPRoutes listed under ``status.router.gateways[].httpRoutes``."""
        router = self.status.router if self.status else None
        if router is None:
            return []
        return [r for g in router.gateways or [] for r in g.http_routes or []]


# --- Gateway API HTTPRoute (gateway.networking.k8s.io/v1) -------------------------------------------------


class ParentReference(ExternalModelBase):
    """``spec.parentRefs[]`` / ``status.parents[].parentRef``."""

    group: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str
    section_name: str | None = None
    port: int | None = None


class RouteParentStatus(ExternalModelBase):
    """``status.parents[]``."""

    parent_ref: ParentReference
    controller_name: str | None = None
    conditions: list[ObservedCondition] | None = None


class HTTPRouteSpec(ExternalModelBase):
    """The parts of an HTTPRoute spec the reconcilers read; rules are kept as plain dicts."""

    parent_refs: list[ParentReference] | None = None
    hostnames: list[str] | None = None
    rules: list[dict[str, Any]] | None = None


class HTTPRouteStatus(ExternalModelBase):
    """``status`` of an HTTPRoute."""

    parents: list[RouteParentStatus] | None = None


class HTTPRoute(ExternalModelBase):
    """Gateway API HTTPRoute (read view)."""

    api_version: str = "gateway.networking.k8s.io/v1"
    kind: str = "HTTPRoute"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: HTTPRouteSpec = Field(default_factory=HTTPRouteSpec)
    status: HTTPRouteStatus | None = None

    def attached_to(self, gateway_namespace: str, gateway_name: str) -> bool:
        """True when a parentRef names the Gateway (a missing namespace means the route's own)."""
        own = self.metadata.namespace
        return any(
            p.name == gateway_name and (p.namespace or own) == gateway_namespace and (p.kind or "Gateway") == "Gateway"
            for p in self.spec.parent_refs or []
        )

    def accepted_by(self, gateway_namespace: str, gateway_name: str) -> bool:
        """True when the status reports ``Accepted=True`` for that Gateway parent."""
        own = self.metadata.namespace
        return any(
            p.parent_ref.name == gateway_name
            and (p.parent_ref.namespace or own) == gateway_namespace
            and _condition_is_true(p.conditions, "Accepted")
            for p in (self.status.parents if self.status else None) or []
        )
