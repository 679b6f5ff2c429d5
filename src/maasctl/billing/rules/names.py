"""Names, labels and annotations of what the billing controllers generate (one place, pure)."""

from __future__ import annotations

import hashlib
import re
from typing import Final

from maasctl.contract import billing_terms

__all__ = [
    "FIELD_MANAGER",
    "MANAGED_BY",
    "PLAN_LABEL",
    "PLAN_NAMESPACE_LABEL",
    "QUEUE_CLASS_ANNOTATION",
    "STATUS_FIELD_MANAGER",
    "TENANT_LABEL",
    "bounded",
    "label_value",
    "plan_labels",
    "policy_name",
    "queue_name",
]

FIELD_MANAGER: Final = "billing-controller"
STATUS_FIELD_MANAGER: Final = "billing-controller-status"
MANAGED_BY: Final = "billing-controller"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
PLAN_LABEL: Final = "billing.opendatahub.io/plan"
PLAN_NAMESPACE_LABEL: Final = "billing.opendatahub.io/plan-namespace"
TENANT_LABEL: Final = "billing.opendatahub.io/tenant"
ORGANIZATION_LABEL: Final = billing_terms.ORGANIZATION_LABEL  # the rule maas-api shares lives in the contract
GEO_LABEL: Final = "billing.opendatahub.io/geo"
QUEUE_CLASS_ANNOTATION: Final = "billing.opendatahub.io/queue-class"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def bounded(name: str, limit: int) -> str:
    """`name` if it fits in `limit` characters, else a prefix plus a stable 10-hex hash of the whole."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: limit - 11].rstrip('-.')}-{digest}"


def label_value(value: str) -> str:
    """`value` when it is a valid label value, else a stable hashed stand-in (labels are for selection only)."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]


def policy_name(plan: str) -> str:
    """Name of a Plan's generated AuthPolicy, RateLimitPolicy and TokenRateLimitPolicy (in the Plan's namespace)."""
    return bounded(f"billing-plan-{plan}", 253)


def queue_name(tenant_namespace: str, tenant: str) -> str:
    """Name of a tenant's ClusterQueue (cluster-scoped, so the namespace is part of it)."""
    return bounded(f"billing-{tenant_namespace}-{tenant}", 253)


def plan_labels(namespace: str, plan: str) -> dict[str, str]:
    """Labels on every object generated for a Plan: ours, and which Plan it belongs to."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/part-of": "maasctl-billing",
        PLAN_LABEL: label_value(plan),
        PLAN_NAMESPACE_LABEL: label_value(namespace),
    }
