"""Names, labels and annotations of every object the controller generates (one place, so they never drift).

Every generated object carries `app.kubernetes.io/managed-by: maas-controller`, `app.kubernetes.io/part-of`,
`maas.opendatahub.io/model` and `maas.opendatahub.io/model-namespace` (the labels the data plane reads live in
`contract.labels`). Children in another namespace than their source get labels,
never ownerReferences (Kubernetes garbage collection ignores cross-namespace owners).

Long values are shortened with a stable hash suffix: names to 253 characters, label values to 63. The same
input always yields the same output, so reconcilers can compute a child's name or selector without reading it.

Opt-out: an object annotated `opendatahub.io/managed: "false"` is never changed or deleted (`is_opted_out`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.contract.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MODEL_ALIASES_ANNOTATION,
    MODEL_LABEL,
    MODEL_NAMESPACE_LABEL,
    PUBLISHED_MODEL_ANNOTATION,
    TARGET_MODEL_ANNOTATION,
    UPSTREAM_KEY_FIELD_ANNOTATION,
    UPSTREAM_KEY_LABEL,
    UPSTREAM_KEY_SECRET_ANNOTATION,
)

__all__ = [
    "AUTH_POLICIES_ANNOTATION",
    "COMPONENT_LABEL",
    "EXTERNAL_MODEL_LABEL",
    "FIELD_MANAGER",
    "GATEWAY_NAMESPACE_LABEL",
    "GATEWAY_NAME_LABEL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MODEL_ALIASES_ANNOTATION",
    "MODEL_LABEL",
    "MODEL_NAMESPACE_LABEL",
    "OPT_OUT_ANNOTATION",
    "OPT_OUT_VALUE",
    "PART_OF_LABEL",
    "PUBLISHED_MODEL_ANNOTATION",
    "STATUS_FIELD_MANAGER",
    "SUBSCRIPTIONS_ANNOTATION",
    "SUBSCRIPTION_LABEL",
    "SUBSCRIPTION_NAMESPACE_LABEL",
    "TARGET_MODEL_ANNOTATION",
    "UPSTREAM_KEY_FIELD_ANNOTATION",
    "UPSTREAM_KEY_LABEL",
    "UPSTREAM_KEY_SECRET_ANNOTATION",
    "authpolicy_name",
    "dns_label_name",
    "external_route_name",
    "external_service_name",
    "gateway_labels",
    "is_managed",
    "is_opted_out",
    "label_value",
    "model_labels",
    "model_selector",
    "stable_hash",
    "trlp_name",
    "truncate_name",
]

PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
GATEWAY_NAMESPACE_LABEL: Final = "maas.opendatahub.io/gateway-namespace"
GATEWAY_NAME_LABEL: Final = "maas.opendatahub.io/gateway-name"
SUBSCRIPTION_LABEL: Final = "maas.opendatahub.io/subscription"
SUBSCRIPTION_NAMESPACE_LABEL: Final = "maas.opendatahub.io/subscription-namespace"
EXTERNAL_MODEL_LABEL: Final = "maas.opendatahub.io/external-model"

SUBSCRIPTIONS_ANNOTATION: Final = "maas.opendatahub.io/subscriptions"
"""On a TRLP: the comma-joined `ns/name` of its subscriptions, sorted (the reference's output; never read back)."""
AUTH_POLICIES_ANNOTATION: Final = "maas.opendatahub.io/auth-policies"
"""On an AuthPolicy: the comma-joined `ns/name` of the MaaSAuthPolicies it grants, sorted (output only)."""

OPT_OUT_ANNOTATION: Final = "opendatahub.io/managed"
OPT_OUT_VALUE: Final = "false"

FIELD_MANAGER: Final = "maas-controller"
STATUS_FIELD_MANAGER: Final = "maas-controller-status"

MAX_NAME: Final = 253
MAX_LABEL_VALUE: Final = 63
_HASH_LEN: Final = 10
_LABEL_VALUE_RE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_NOT_DNS: Final = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL_VALUE: Final = re.compile(r"[^A-Za-z0-9_.-]+")


def stable_hash(*parts: str) -> str:
    """10 hex digits of SHA-256 over the parts, JSON-encoded so that ("ab", "c") != ("a", "bc")."""
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:_HASH_LEN]


def truncate_name(name: str, max_length: int = MAX_NAME) -> str:
    """`name` if it fits, else its head plus `-<hash of the whole name>` in exactly `max_length` characters.

    A valid DNS subdomain stays valid: the head is cut back to end in an alphanumeric.
    """
    if len(name) <= max_length:
        return name
    head = name[: max_length - _HASH_LEN - 1].rstrip("-.")
    return f"{head}-{stable_hash(name)}"


def dns_label_name(name: str, max_length: int = 63) -> str:
    """A DNS-1035 label (Service names) derived from any string: lowercase, `[a-z0-9-]`, starts with a letter.

    Unchanged when already valid and short enough; otherwise sanitized and suffixed with a hash of the
    original, so distinct inputs stay distinct.
    """
    if len(name) <= max_length and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        return name
    cleaned = _NOT_DNS.sub("-", name.lower()).strip("-")
    if not cleaned[:1].isalpha():
        cleaned = f"x-{cleaned}".rstrip("-")
    head = cleaned[: max_length - _HASH_LEN - 1].rstrip("-")
    return f"{head}-{stable_hash(name)}"


def label_value(value: str) -> str:
    """A valid label value (<= 63, `[A-Za-z0-9_.-]`, alphanumeric ends) derived from any string.

    Unchanged when already valid; otherwise sanitized, cut and suffixed with a hash of the original.
    """
    if len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE_RE.fullmatch(value):
        return value
    cleaned = _NOT_LABEL_VALUE.sub("-", value)
    head = cleaned[: MAX_LABEL_VALUE - _HASH_LEN - 1]
    head = re.sub(r"^[^A-Za-z0-9]+", "", head)
    head = re.sub(r"[^A-Za-z0-9]+$", "", head)
    return f"{head}-{stable_hash(value)}" if head else stable_hash(value)


def trlp_name(modelref_name: str) -> str:
    """`maas-trlp-<maasmodelref-name>` (seed 000), shortened with a hash when longer than 253."""
    return truncate_name(f"maas-trlp-{modelref_name}")


def authpolicy_name(modelref_name: str) -> str:
    """`maas-auth-<maasmodelref-name>`: the one AuthPolicy of a model route."""
    return truncate_name(f"maas-auth-{modelref_name}")


def external_route_name(modelref_name: str) -> str:
    """`maas-<maasmodelref-name>`: the HTTPRoute rendered for an ExternalModel."""
    return truncate_name(f"maas-{modelref_name}")


def external_service_name(modelref_name: str) -> str:
    """The ExternalName Service of an ExternalModel route (a DNS-1035 label, at most 63)."""
    return dns_label_name(f"maas-{modelref_name}")


def model_labels(model: ObjectRef, part_of: str, component: str) -> dict[str, str]:
    """The labels every object generated for `model` (a MaaSModelRef) carries."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        PART_OF_LABEL: part_of,
        COMPONENT_LABEL: component,
        MODEL_LABEL: label_value(model.name),
        MODEL_NAMESPACE_LABEL: label_value(model.namespace),
    }


def model_selector(model: ObjectRef) -> dict[str, str]:
    """matchLabels selecting everything generated for `model` (for pruning and deletion)."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        MODEL_LABEL: label_value(model.name),
        MODEL_NAMESPACE_LABEL: label_value(model.namespace),
    }


def gateway_labels(gateway: GatewayRef) -> dict[str, str]:
    """`maas.opendatahub.io/gateway-namespace` / `gateway-name` (seed 000, per-gateway routes)."""
    return {
        GATEWAY_NAMESPACE_LABEL: label_value(gateway.namespace),
        GATEWAY_NAME_LABEL: label_value(gateway.name),
    }


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def is_opted_out(obj: Mapping[str, Any]) -> bool:
    """True if `obj` is annotated `opendatahub.io/managed: "false"`: never change or delete it.

    The comparison ignores case and surrounding blanks: a near miss such as `"False"` is clearly meant as an
    opt-out, and wrongly leaving an object alone is the safer mistake.
    """
    annotations = _metadata(obj).get("annotations")
    if not isinstance(annotations, Mapping):
        return False
    value = annotations.get(OPT_OUT_ANNOTATION)
    return isinstance(value, str) and value.strip().lower() == OPT_OUT_VALUE


def is_managed(obj: Mapping[str, Any]) -> bool:
    """True if `obj` carries our managed-by label (only such objects may be pruned)."""
    labels = _metadata(obj).get("labels")
    return isinstance(labels, Mapping) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
