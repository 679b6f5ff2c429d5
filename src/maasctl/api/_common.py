"""Types shared by several MaaS kinds: phases, object references and per-reference status entries."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from maasctl.api._base import CamelModel, KubeSchema
from maasctl.api._fields import NamespaceName, ObjectName, safe

DISPLAY_NAME_ANNOTATION = "openshift.io/display-name"
DESCRIPTION_ANNOTATION = "openshift.io/description"


class PolicyPhase(StrEnum):
    """Lifecycle phase of a MaaSSubscription or MaaSAuthPolicy."""

    PENDING = "Pending"
    ACTIVE = "Active"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    INVALID = "Invalid"


class ModelReference(CamelModel):
    """A MaaSModelRef, named by namespace and name."""

    name: ObjectName = Field(description="Name of the MaaSModelRef.")
    namespace: NamespaceName = Field(description="Namespace where the MaaSModelRef lives.")


GroupName = Annotated[str, Field(min_length=1, max_length=256), safe("group name")]


class GroupReference(CamelModel):
    """An identity group, matched exactly against the caller's groups."""

    name: GroupName = Field(description="Name of the identity group, matched exactly.")


GroupList = Annotated[list[GroupReference], Field(max_length=128), KubeSchema(list_type="map", list_map_keys=("name",))]


class ResourceRefStatus(CamelModel):
    """Observed state of one referenced or generated object."""

    name: str = Field(max_length=253, description="Name of the object.")
    namespace: str = Field(max_length=63, description="Namespace of the object.")
    ready: bool = Field(description="True when the object is found and in the desired state.")
    reason: str | None = Field(
        default=None, max_length=256, description="Machine-readable reason for the value of ready."
    )
    message: str | None = Field(default=None, max_length=1024, description="Human-readable detail for the reason.")
