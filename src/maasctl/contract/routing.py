"""Body-based routing on one base URL: the names the route builder and both data-plane fronts share.

An OpenAI SDK pointed at `https://<gateway>/v1` calls `/v1/chat/completions` (and friends) for every model and
names the model in the body. The generated HTTPRoute of each model therefore also matches those base paths
(`BASE_INFERENCE_PATHS`, path Exact) together with the header `MODEL_HEADER: <published model name>`; the data
plane reads `model` from the body (`dataplane.routing.body_model`) and sets that header before the route is
matched (the processor does it in its "pre" stream and asks Envoy to clear its route cache). The header name is
the reference implementation's, so its users switch without changes; a client may never send it (it is in the
server-decided `x-gateway-*` family, `contract.edge`).

An in-cluster (KServe) model's HTTPRoute is KServe's, so it gets no such rules: the generated AuthPolicy of the
model names the model (`BASE_URL_MODEL_ANNOTATION`, the name clients send) and the path its route serves
(`BASE_URL_PREFIX_ANNOTATION`, the path of the LLMInferenceService's URL), and the data plane sends a base-URL
request naming it to `<prefix><base path>` instead (`in_cluster_path`; the processor rewrites `:path` and clears
Envoy's route cache), so that route's own AuthPolicy and TokenRateLimitPolicy admit and count it - one limit,
not a second route with a second counter.

`GET /v1/models` on the base URL is maas-api's listing (`MODELS_LISTING_PATH`), routed to maas-api. maas-api lists a
model only when `GET <model path>/v1/models` with the caller's credential answers 2xx or 405, through the model's
own AuthPolicy. An ExternalModel whose provider cannot answer that (`answers_model_listing`: a Messages provider,
several providers behind the relay) gets an Exact, GET-only rule at that path, and the data plane answers it
itself, after the AuthPolicy admitted the caller: OpenAI's list naming the published model, no provider called
(`dataplane.listing`; docs/providers.md, "The model listing").
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "BASE_INFERENCE_PATHS",
    "BASE_URL_MODEL_ANNOTATION",
    "BASE_URL_PREFIX_ANNOTATION",
    "MAX_PREFIX",
    "MESSAGES_PATH",
    "MODELS_LISTING_PATH",
    "MODEL_HEADER",
    "answers_model_listing",
    "endpoint_prefix",
    "in_cluster_path",
    "is_model_listing_path",
    "valid_prefix",
]

MODEL_HEADER: Final = "x-gateway-model-name"
MESSAGES_PATH: Final = "/v1/messages"
BASE_INFERENCE_PATHS: Final = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
                                MESSAGES_PATH)
"""`/v1/messages` is Anthropic's Messages API: the door for Anthropic clients onto every ExternalModel, whichever
format its provider speaks (docs/providers.md)."""
MODELS_LISTING_PATH: Final = "/v1/models"

BASE_URL_MODEL_ANNOTATION: Final = "maas.opendatahub.io/base-url-model"
"""On the generated AuthPolicy of an in-cluster model: the name a base-URL request sends in `model`."""
BASE_URL_PREFIX_ANNOTATION: Final = "maas.opendatahub.io/base-url-prefix"
"""On the same AuthPolicy: the path prefix its (KServe's) route serves the model on, e.g. `/llm/granite`."""
MAX_PREFIX: Final = 512
_PREFIX: Final = re.compile(r"(?:/[A-Za-z0-9._~-]+)+")


def valid_prefix(prefix: str) -> bool:
    """True for a prefix the data plane may route to: `/segment[/segment...]` of unreserved characters, no dot
    segment, no trailing slash, at most `MAX_PREFIX` characters (so it is canonical: `contract.edge`)."""
    return (len(prefix) <= MAX_PREFIX and _PREFIX.fullmatch(prefix) is not None
            and all(part not in (".", "..") for part in prefix.split("/")[1:]))


def endpoint_prefix(endpoint: str | None) -> str | None:
    """The path prefix of a model's URL on the gateway (`http://gw/llm/granite` -> `/llm/granite`); None when
    it has none or is not one `valid_prefix` accepts."""
    if not endpoint:
        return None
    try:
        path = urlsplit(endpoint).path.rstrip("/")
    except ValueError:
        return None
    return path if valid_prefix(path) else None


def in_cluster_path(prefix: str, path: str) -> str | None:
    """Where a base-URL request (`path`, one of `BASE_INFERENCE_PATHS`) naming an in-cluster model goes: the
    model's own path, `<prefix><path>` (`/llm/granite` + `/v1/chat/completions`). None for the Messages door:
    translating it needs a rule of ours on the route (ExternalModels only, docs/providers.md)."""
    return None if path == MESSAGES_PATH else prefix + path


def answers_model_listing(api_format: str, relayed: bool) -> bool:
    """True when the data plane itself answers `GET <model path>/v1/models` on an ExternalModel's route (the
    generated route then has that rule, Exact and GET only): a Messages provider has no OpenAI listing (its route
    serves chat completions and the Messages door only), and the provider relay of a model with several providers
    serves chat completions only. Any other ExternalModel's provider answers it under its base path."""
    return relayed or api_format == "messages"


def is_model_listing_path(path: str) -> bool:
    """True for `<model path>/v1/models` (a non-empty prefix: the base URL's `/v1/models` is maas-api's)."""
    return path.endswith(MODELS_LISTING_PATH) and len(path) > len(MODELS_LISTING_PATH)
