"""Building blocks shared by every MaaS API model.

The pydantic models are the single source of truth for our CRDs: the generator (``crdgen``) reads their JSON
schema, so anything the API server must know (formats, CEL rules, list semantics) is attached to the types
here as a :class:`KubeSchema` marker instead of being written by hand in YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

GROUP = "maas.opendatahub.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "maas"
DEFAULT_SUBSCRIPTION_NAMESPACE = "models-as-a-service"


@dataclass(frozen=True)
class Rule:
    """One CEL ``x-kubernetes-validations`` entry; ``message`` must name the field it is about."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class KubeSchema:
    """Marker adding Kubernetes-specific OpenAPI keywords to the schema of the annotated type.

    Used inside ``Annotated[...]`` on fields and type aliases; for whole models use :func:`model_rules`.
    """

    fmt: str | None = None
    rules: tuple[Rule, ...] = ()
    list_type: Literal["atomic", "set", "map"] | None = None
    list_map_keys: tuple[str, ...] = ()
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        apply_extra(schema, self.keywords())
        return schema

    def keywords(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(self.extra)
        if self.fmt is not None:
            kw["format"] = self.fmt
        if self.rules:
            kw["x-kubernetes-validations"] = [r.to_dict() for r in self.rules]
        if self.list_type is not None:
            kw["x-kubernetes-list-type"] = self.list_type
        if self.list_map_keys:
            kw["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        return kw


def apply_extra(schema: dict[str, Any], keywords: dict[str, Any]) -> None:
    """Merge keywords into a JSON schema node, concatenating CEL rule lists instead of replacing them."""
    for key, value in keywords.items():
        if key == "x-kubernetes-validations":
            schema[key] = [*schema.get(key, []), *value]
        else:
            schema[key] = value


def model_rules(*rules: Rule) -> dict[str, Any]:
    """``json_schema_extra`` for a model whose CEL rules look at several of its fields."""
    return {"x-kubernetes-validations": [r.to_dict() for r in rules]}


def _int64(value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError("value does not fit in a signed 64-bit integer")
    return value


Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1), KubeSchema(fmt="int32")]
# The int64 range is checked in Python only: the API server reads schema bounds as float64, where 2**63 - 1
# is not representable, and rejects such a maximum.
Int64 = Annotated[int, AfterValidator(_int64), KubeSchema(fmt="int64")]
Generation = Annotated[int, Field(ge=0), AfterValidator(_int64), KubeSchema(fmt="int64")]


class CamelModel(BaseModel):
    """Base of our own spec/status types: camelCase on the wire, snake_case in Python, unknown keys refused.

    Unknown keys are refused because objects of our kinds are pruned by our own CRD, so an unexpected key can
    only be a typo in a test or a manifest.

    Validators are built on first use (``defer_build``), here and in ``ExternalModelBase``: building all ~70 at
    import took ~70 ms of every process's start, and each process uses a few (a restarted controller none of the
    billing or guardrails kinds it has no objects of).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        defer_build=True,
    )


class ExternalModelBase(BaseModel):
    """Base of the light models of third-party kinds we only read: permissive, keeps unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
        defer_build=True,
    )


class ObjectMeta(ExternalModelBase):
    """The parts of ``metadata`` the reconcilers use; everything else is kept as extra keys."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None


class ConditionStatus(StrEnum):
    """Status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CamelModel):
    """Standard Kubernetes condition (same shape as metav1.Condition)."""

    type: str = Field(max_length=316, description="Type of the condition in CamelCase, for example Ready.")
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation of the object this condition was computed for."
    )
    last_transition_time: datetime = Field(description="Last time the condition changed from one status to another.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        description="Machine-readable CamelCase reason for the condition's last transition.",
    )
    message: str = Field(
        default="", max_length=32768, description="Human-readable message with details about the transition."
    )


Conditions = Annotated[list[Condition], KubeSchema(list_type="map", list_map_keys=("type",))]


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry shown by ``kubectl get``."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class CrdInfo:
    """Names and presentation of a kind, beyond what its pydantic model says.

    `group`, `scope` and `root_rules` (CEL on the whole object, e.g. about `metadata.name`) let other API
    groups (the billing kinds) use the same generator; `kind` names a kind whose Python class cannot carry its
    name (the reference's `inference.opendatahub.io` ExternalModel beside ours).
    """

    plural: str
    short_names: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    categories: tuple[str, ...] = (CATEGORY,)
    group: str = GROUP
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    root_rules: tuple[Rule, ...] = ()
    kind: str | None = None


AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


class KubeObject(CamelModel):
    """A whole object of one of our kinds (apiVersion, kind, metadata, spec, status).

    Subclasses set ``crd`` and narrow ``spec``/``status``; the class docstring becomes the CRD description.
    """

    crd: ClassVar[CrdInfo]

    api_version: str = Field(default=API_VERSION, description="APIVersion of the object.")
    kind: str = Field(description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")


K = TypeVar("K", bound=BaseModel)


def parse(kind_model: type[K], obj: dict[str, Any]) -> K:
    """Parse an object as read from the API server or the cache into its pydantic model.

    Raises ``pydantic.ValidationError`` when the object does not satisfy the model (for our kinds that means
    the object bypassed admission, e.g. it was stored under an older CRD).
    """
    return kind_model.model_validate(obj)


def dump(model: BaseModel) -> dict[str, Any]:
    """Render a model as a JSON-compatible dict for the API server (camelCase, unset optionals omitted)."""
    out: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out
