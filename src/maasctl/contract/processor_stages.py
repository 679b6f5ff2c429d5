"""How Envoy tells the payload processor which of its two filters a stream comes from: shared by the controller
(which renders the EnvoyFilter / EnvoyExtensionPolicy) and the processor (which reads it).

Both filters call one gRPC server. The Istio EnvoyFilter sends the gRPC initial metadata
`STAGE_METADATA_KEY: pre|post` on every stream. Envoy Gateway's extProc API has no initial-metadata field, so
there the stage is also told apart by the processing mode Envoy announces in the first message's
`protocol_config`: the pre filter never asks for the response body (`response_body_mode: NONE`), the post filter
always does (`STREAMED`).
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["DEFAULT_PROCESSOR_PORT", "STAGES", "STAGE_METADATA_KEY", "STAGE_POST", "STAGE_PRE", "Stage"]

Stage = Literal["pre", "post"]

STAGE_METADATA_KEY: Final = "x-maas-stage"
STAGE_PRE: Final[Stage] = "pre"
"""Before Kuadrant's wasm filter: edge headers guard, body `model` -> `x-gateway-model-name` + route cache clear."""
STAGE_POST: Final[Stage] = "post"
"""After Kuadrant's wasm filter (auth done): metering, reservation, guardrails, provider key, usage record."""
STAGES: Final[tuple[Stage, Stage]] = (STAGE_PRE, STAGE_POST)

DEFAULT_PROCESSOR_PORT: Final = 9004
"""The processor's gRPC port (`maasctl payload-processor --port 9004`, Service port `grpc`)."""
