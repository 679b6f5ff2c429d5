"""Labels and annotations the controller writes and the data plane reads: part of the shared contract.

The gateway finds a model's routes by `MODEL_LABEL` / `MODEL_NAMESPACE_LABEL`, the provider key Secret by
`UPSTREAM_KEY_LABEL` (it watches only Secrets carrying it) and the route's credential by the two
`UPSTREAM_KEY_*` annotations (the Secret's name and key, never the value). An ExternalModel route names the
model clients call (`PUBLISHED_MODEL_ANNOTATION`, plus `MODEL_ALIASES_ANNOTATION`) and the provider's name for
it (`TARGET_MODEL_ANNOTATION`): the gateway checks and rewrites the body's `model` with them.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MODEL_ALIASES_ANNOTATION",
    "MODEL_LABEL",
    "MODEL_NAMESPACE_LABEL",
    "PUBLISHED_MODEL_ANNOTATION",
    "TARGET_MODEL_ANNOTATION",
    "UPSTREAM_KEY_FIELD_ANNOTATION",
    "UPSTREAM_KEY_LABEL",
    "UPSTREAM_KEY_SECRET_ANNOTATION",
]

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "maas-controller"
MODEL_LABEL: Final = "maas.opendatahub.io/model"
MODEL_NAMESPACE_LABEL: Final = "maas.opendatahub.io/model-namespace"
UPSTREAM_KEY_LABEL: Final = "maas.opendatahub.io/upstream-key"
"""On an ExternalModel's credential Secret: the gateway component that injects upstream keys watches these."""
UPSTREAM_KEY_SECRET_ANNOTATION: Final = "maas.opendatahub.io/upstream-key-secret"
"""On an ExternalModel's HTTPRoute: the name (never the value) of the Secret holding the provider key."""
UPSTREAM_KEY_FIELD_ANNOTATION: Final = "maas.opendatahub.io/upstream-key-secret-key"
"""On an ExternalModel's HTTPRoute: which key of that Secret holds the provider key."""
PUBLISHED_MODEL_ANNOTATION: Final = "maas.opendatahub.io/published-model"
"""On an ExternalModel's HTTPRoute: the model name clients send and see (the ExternalModel's name)."""
TARGET_MODEL_ANNOTATION: Final = "maas.opendatahub.io/target-model"
"""On an ExternalModel's HTTPRoute: the provider's model name (`spec.targetModel`) the request body carries
upstream."""
MODEL_ALIASES_ANNOTATION: Final = "maas.opendatahub.io/model-aliases"
"""On an ExternalModel's HTTPRoute: other names clients may send for the same model (comma-separated; the
MaaSModelRef's name)."""
