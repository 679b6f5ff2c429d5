"""The two ext_proc filters of a managed Gateway and the messages Envoy sends each (its processing mode).

Both run on one processor; the filter names its stage in the gRPC initial metadata (`x-maas-stage`), which the
Envoy filter's `grpc_service.initial_metadata` sets (Istio). Envoy Gateway cannot set it: there the first message's
`protocol_config` tells (`contract.processor_stages`: only the post filter asks for the response body). The
modes here are the ones the install builders render, so
the processor, the Envoy side of the local gateway and the rendered filters agree on one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from maasctl.contract.processor_stages import STAGE_METADATA_KEY

__all__ = ["MODES", "POST", "PRE", "STAGE_METADATA", "BodyMode", "FilterModes", "Stage", "stage_from_protocol",
           "stage_of"]

Stage = Literal["pre", "post"]
BodyMode = Literal["NONE", "BUFFERED", "STREAMED"]

STAGE_METADATA: Final = STAGE_METADATA_KEY


@dataclass(frozen=True, kw_only=True)
class FilterModes:
    """One filter's `processing_mode` (Envoy's names), whether its stage meters (one usage record per stream)
    and whether a header change asks Envoy to match the route again (the body-routing header)."""

    stage: Stage
    request_body: BodyMode
    response_headers: bool
    response_body: BodyMode
    request_trailers: bool
    response_trailers: bool
    meters: bool
    clears_route_cache: bool


PRE: Final = FilterModes(stage="pre", request_body="BUFFERED", response_headers=False, response_body="NONE",
                         request_trailers=False, response_trailers=False, meters=False, clears_route_cache=True)
"""Before Kuadrant's wasm: the edge headers guard and the body's `model` copied into the routing header."""

POST: Final = FilterModes(stage="post", request_body="BUFFERED", response_headers=True, response_body="STREAMED",
                          request_trailers=True, response_trailers=True, meters=True, clears_route_cache=False)
"""After Kuadrant's wasm: metering, reservation, guardrails, provider key, rename, stream usage, settle."""

MODES: Final[dict[str, FilterModes]] = {"pre": PRE, "post": POST}


def stage_of(metadata: object) -> FilterModes | None:
    """The filter a stream belongs to, from its gRPC initial metadata; None when absent or unknown."""
    if not metadata:
        return None
    for key, value in metadata:  # type: ignore[attr-defined]
        if key == STAGE_METADATA:
            return MODES.get(value if isinstance(value, str) else bytes(value).decode("latin-1"))
    return None


_NONE: Final = 0  # ProcessingMode.BodySendMode.NONE, as protocol_config reports it


def stage_from_protocol(first: Any) -> FilterModes | None:
    """The filter of a stream without `x-maas-stage` (Envoy Gateway), from its first message's `protocol_config`:
    a filter that never asks for the response body is the pre filter, one that does is the post filter. None when
    the message carries no protocol_config (Envoy before 1.33): such a stream is refused, never guessed."""
    if first is None or not first.HasField("protocol_config"):
        return None
    return PRE if first.protocol_config.response_body_mode == _NONE else POST
