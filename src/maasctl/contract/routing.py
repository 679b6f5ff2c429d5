"""Body-based routing on one base URL: the names the route builder and both data-plane fronts share.

An OpenAI SDK pointed at `https://<gateway>/v1` calls `/v1/chat/completions` (and friends) for every model and
names the model in the body. The generated HTTPRoute of each model therefore also matches those base paths
(`BASE_INFERENCE_PATHS`, path Exact) together with the header `MODEL_HEADER: <published model name>`; the data
plane reads `model` from the body (`dataplane.routing.body_model`) and sets that header before the route is
matched (the processor does it in its "pre" stream and asks Envoy to clear its route cache). The header name is
the reference implementation's, so its users switch without changes; a client may never send it (it is in the
server-decided `x-gateway-*` family, `contract.edge`).

`GET /v1/models` on the base URL is maas-api's listing (`MODELS_LISTING_PATH`), routed to maas-api.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BASE_INFERENCE_PATHS",
    "MODELS_LISTING_PATH",
    "MODEL_HEADER",
]

MODEL_HEADER: Final = "x-gateway-model-name"
BASE_INFERENCE_PATHS: Final = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
                                "/v1/messages")
"""`/v1/messages` is Anthropic's Messages API: the door for Anthropic clients onto every ExternalModel, whichever
format its provider speaks (docs/providers.md)."""
MODELS_LISTING_PATH: Final = "/v1/models"
