"""MaaSAuthPolicy: who may use which published models."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

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
from maasctl.api._common import GroupList, ModelReference, PolicyPhase, ResourceRefStatus
from maasctl.api._fields import CostCenter, MeteringLabels, OrganizationId, SubjectUsers

SUBJECTS_RULE = Rule(
    rule="(has(self.groups) && size(self.groups) > 0) || (has(self.users) && size(self.users) > 0)",
    message="subjects must list at least one group or user",
)

ModelRefList = Annotated[
    list[ModelReference],
    Field(min_length=1, max_length=256),
    KubeSchema(list_type="map", list_map_keys=("namespace", "name")),
]


class Subjects(CamelModel):
    """Identities granted access; a caller matches when any group or the user name matches exactly."""

    model_config = ConfigDict(json_schema_extra=model_rules(SUBJECTS_RULE))

    groups: GroupList | None = Field(default=None, description="Identity groups granted access.")
    users: SubjectUsers | None = Field(default=None, description="User names granted access, matched exactly.")

    @model_validator(mode="after")
    def _at_least_one(self) -> Self:
        if not self.groups and not self.users:
            raise ValueError(SUBJECTS_RULE.message)
        return self


class MeteringMetadata(CamelModel):
    """Attribution attached to usage under this policy."""

    organization_id: OrganizationId | None = Field(
        default=None, description="Organization that usage is attributed to."
    )
    cost_center: CostCenter | None = Field(default=None, description="Cost center that usage is attributed to.")
    labels: MeteringLabels | None = Field(default=None, description="Extra labels for usage records.")


class MaaSAuthPolicySpec(CamelModel):
    """Desired state of a MaaSAuthPolicy."""

    model_refs: ModelRefList = Field(description="Models this policy grants access to.")
    subjects: Subjects = Field(description="Groups and users granted access; at least one entry.")
    metering_metadata: MeteringMetadata | None = Field(
        default=None, description="Optional metering attribution for requests granted by this policy."
    )


class MaaSAuthPolicyStatus(CamelModel):
    """Observed state of a MaaSAuthPolicy."""

    phase: PolicyPhase | None = Field(
        default=None, description="Active, Degraded (some models missing), Failed, Pending or Invalid."
    )
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Ready and conflict conditions."
    )
    model_ref_statuses: Annotated[list[ResourceRefStatus], Field(max_length=256)] | None = Field(
        default=None, description="Per referenced MaaSModelRef: found and ready or not."
    )
    auth_policies: Annotated[list[ResourceRefStatus], Field(max_length=256)] | None = Field(
        default=None, description="Generated Kuadrant AuthPolicies and whether they are enforced."
    )


class MaaSAuthPolicy(KubeObject):
    """Grants groups and users access to published models. Accepted only in the subscription namespace."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="maasauthpolicies",
        short_names=("maasauth", "maasap"),
        printer_columns=(
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            PrinterColumn("Models", ".spec.modelRefs[*].name", description="Models access is granted to.", priority=1),
            AGE_COLUMN,
        ),
    )

    kind: Literal["MaaSAuthPolicy"] = Field(default="MaaSAuthPolicy", description="Kind of the object.")
    spec: MaaSAuthPolicySpec = Field(description="Models and the subjects allowed to use them.")
    status: MaaSAuthPolicyStatus | None = Field(default=None, description="Observed state, written by maasctl.")
