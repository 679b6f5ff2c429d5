"""How Envoy tells the payload processor which of its two filters a stream comes from: shared by the controller
(which renders the EnvoyFilter / EnvoyExtensionPolicy) and the processor (which reads it).

Both filters call one gRPC server. The Istio EnvoyFilter sends the gRPC initial metadata
`STAGE_METADATA_KEY: pre|post` on every stream. Envoy Gateway's extProc API has no initial-metadata field, so
there the stage is also told apart by the processing mode Envoy announces in the first message's
`protocol_config`: the pre filter never asks for the response body (`response_body_mode: NONE`), the post filter
always does (`STREAMED`).

`PRE` and `POST` are the one table of what Envoy sends each filter: the install builders render it
(`builders.payloadwiring`, the EnvoyFilter and the EnvoyExtensionPolicy), the processor and the local gateway's
Envoy side (`maasctl.payload`) run on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["DEFAULT_BYPASS_ROUTES", "DEFAULT_PROCESSOR_PORT", "MODES", "POST", "PRE", "STAGES", "STAGE_METADATA_KEY",
           "STAGE_POST", "STAGE_PRE", "BodyMode", "FilterModes", "Stage"]

Stage = Literal["pre", "post"]
BodyMode = Literal["NONE", "BUFFERED", "STREAMED"]

STAGE_METADATA_KEY: Final = "x-maas-stage"
STAGE_PRE: Final[Stage] = "pre"
"""Before Kuadrant's wasm filter: edge headers guard, body `model` -> `x-gateway-model-name` + route cache clear."""
STAGE_POST: Final[Stage] = "post"
"""After Kuadrant's wasm filter (auth done): metering, reservation, guardrails, provider key, usage record."""
STAGES: Final[tuple[Stage, Stage]] = (STAGE_PRE, STAGE_POST)

DEFAULT_BYPASS_ROUTES: Final[tuple[str, ...]] = ("opendatahub/maas-api",)
"""HTTPRoutes (`namespace/name`) whose traffic never goes through the processor: maas-api's own API, which
meters nothing and whose AuthPolicy (hand-written, `manifests/base/maas-api`) renders no `x-maas-identity`. The
controller renders the per-route bypass for them; the local gateway's Envoy side skips them the same way."""

DEFAULT_PROCESSOR_PORT: Final = 9004
"""The processor's gRPC port (`maasctl payload-processor --port 9004`, Service port `grpc`)."""


@dataclass(frozen=True, kw_only=True)
class FilterModes:
    """One filter's `processing_mode` (Envoy's names), whether the processor may override it for one request
    (`allow_mode_override`), whether its stage meters (one usage record per stream) and whether a header
    change asks Envoy to match the route again (the body-routing header)."""

    stage: Stage
    request_body: BodyMode
    response_headers: bool
    response_body: BodyMode
    request_trailers: bool
    response_trailers: bool
    allow_mode_override: bool = False
    meters: bool
    clears_route_cache: bool


PRE: Final = FilterModes(stage=STAGE_PRE, request_body="BUFFERED", response_headers=False, response_body="NONE",
                         request_trailers=False, response_trailers=False, allow_mode_override=False, meters=False,
                         clears_route_cache=True)
"""Before Kuadrant's wasm: the request only - headers and the whole body, so `model` can be read before routing."""

POST: Final = FilterModes(stage=STAGE_POST, request_body="BUFFERED", response_headers=True,
                          response_body="STREAMED", request_trailers=True, response_trailers=True,
                          allow_mode_override=True, meters=True, clears_route_cache=False)
"""After Kuadrant's wasm: request headers and whole body (metering, reservation, input guardrails, provider key),
response headers, the response body as it streams (usage scan, model rename, output guardrails) and both
trailers. The processor overrides the response body to BUFFERED for an answer the output guardrails may replace
whole (`mode_override`, allowed here): in STREAMED mode its head has left before the body is read."""

MODES: Final[dict[Stage, FilterModes]] = {STAGE_PRE: PRE, STAGE_POST: POST}
