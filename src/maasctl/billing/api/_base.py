"""The billing API group and what every billing kind shares."""

from __future__ import annotations

from typing import Final

from pydantic import Field

from maasctl.api._base import KubeObject

GROUP: Final = "billing.opendatahub.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "billing"


class BillingObject(KubeObject):
    """A whole object of one of the billing kinds."""

    api_version: str = Field(default=API_VERSION, description="APIVersion of the object.")
