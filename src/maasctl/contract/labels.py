"""Labels and annotations the controller writes and the data plane reads: part of the shared contract.

The gateway finds a model's routes by `MODEL_LABEL` / `MODEL_NAMESPACE_LABEL`, the provider key Secret by
`UPSTREAM_KEY_LABEL` (it watches only Secrets carrying it) and the route's credential by the two
`UPSTREAM_KEY_*` annotations (the Secret's name and key, never the value). An ExternalModel route names the
model clients call (`PUBLISHED_MODEL_ANNOTATION`, plus `MODEL_ALIASES_ANNOTATION`) and the provider's name for
it (`TARGET_MODEL_ANNOTATION`): the gateway checks and rewrites the body's `model` with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from maasctl.api.modelref import MAX_COMPLETION_TOKENS

__all__ = [
    "API_FORMATS",
    "API_FORMAT_ANNOTATION",
    "COMPLETION_CEILING_ANNOTATION",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MAX_COMPLETION_CEILING",
    "MODEL_ALIASES_ANNOTATION",
    "MODEL_LABEL",
    "MODEL_NAMESPACE_LABEL",
    "PUBLISHED_MODEL_ANNOTATION",
    "TARGET_MODEL_ANNOTATION",
    "UPSTREAM_AUTH_ANNOTATION",
    "UPSTREAM_KEY_FIELD_ANNOTATION",
    "UPSTREAM_KEY_LABEL",
    "UPSTREAM_KEY_SECRET_ANNOTATION",
    "UPSTREAM_KEY_SELECTOR",
    "completion_ceiling_of",
]

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "maas-controller"
MODEL_LABEL: Final = "maas.opendatahub.io/model"
MODEL_NAMESPACE_LABEL: Final = "maas.opendatahub.io/model-namespace"
UPSTREAM_KEY_LABEL: Final = "maas.opendatahub.io/upstream-key"
UPSTREAM_KEY_SELECTOR: Final = f"{UPSTREAM_KEY_LABEL}=true"
"""The Secrets holding a provider key: the only Secrets the controller and the data plane cache."""
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
API_FORMAT_ANNOTATION: Final = "maas.opendatahub.io/api-format"
"""On an ExternalModel's HTTPRoute: the provider's API format (`messages`: Anthropic's; absent: `openai-chat`).
The data plane translates an OpenAI Chat request and its answer for a `messages` provider (docs/providers.md)."""
API_FORMATS: Final = ("openai-chat", "messages")
"""The values of `API_FORMAT_ANNOTATION` (ExternalModel `spec.apiFormat`) the controller writes and the data plane
speaks."""
UPSTREAM_AUTH_ANNOTATION: Final = "maas.opendatahub.io/upstream-auth"
"""On an ExternalModel's HTTPRoute: how the provider takes its key (`contract.edge.PROVIDER_KEY_SCHEMES`;
absent: `bearer`)."""
COMPLETION_CEILING_ANNOTATION: Final = "maas.opendatahub.io/max-completion-tokens"
"""On a generated model HTTPRoute: the MaaSModelRef's `spec.maxCompletionTokens` (absent: the default). The data
plane reserves at most that many completion tokens per request and sends it as `max_tokens` when the client
stated no bound (`dataplane.body.bound_completion`)."""


MAX_COMPLETION_CEILING: Final = MAX_COMPLETION_TOKENS  # the largest `MaaSModelRef.spec.maxCompletionTokens`


def completion_ceiling_of(annotations: Mapping[str, Any] | None) -> int | None:
    """The explicit completion ceiling a route carries (None: absent or not a whole number 1..1,000,000, which
    the controller never writes; the data plane then uses the default)."""
    text = str((annotations or {}).get(COMPLETION_CEILING_ANNOTATION, "")).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        return None
    value = int(text)
    return value if 1 <= value <= MAX_COMPLETION_CEILING else None
