"""The two ext_proc filters of a managed Gateway and the messages Envoy sends each (its processing mode).

Both run on one processor; the filter names its stage in the gRPC initial metadata (`x-maas-stage`), which the
Envoy filter's `grpc_service.initial_metadata` sets (Istio). Envoy Gateway cannot set it: there the first message's
`protocol_config` tells (`contract.processor_stages`: only the post filter asks for the response body). The
modes here are the ones the install builders render, so
the processor, the Envoy side of the local gateway and the rendered filters agree on one table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm

from maasctl.contract.processor_stages import STAGE_METADATA_KEY

__all__ = ["BODY_MODE_NUMBERS", "MODES", "POST", "PRE", "STAGE_METADATA", "BodyMode", "FilterModes", "Stage",
           "buffered_response", "overridden", "stage_from_protocol", "stage_of"]

Stage = Literal["pre", "post"]
BodyMode = Literal["NONE", "BUFFERED", "STREAMED"]

STAGE_METADATA: Final = STAGE_METADATA_KEY

BODY_MODE_NUMBERS: Final[dict[BodyMode, int]] = {
    "NONE": pm.ProcessingMode.NONE, "STREAMED": pm.ProcessingMode.STREAMED, "BUFFERED": pm.ProcessingMode.BUFFERED}
"""`ProcessingMode.BodySendMode` as it travels (`protocol_config`, `mode_override`)."""
_BODY_MODE_NAMES: Final[dict[int, BodyMode]] = {number: name for name, number in BODY_MODE_NUMBERS.items()}


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


PRE: Final = FilterModes(stage="pre", request_body="BUFFERED", response_headers=False, response_body="NONE",
                         request_trailers=False, response_trailers=False, allow_mode_override=False, meters=False,
                         clears_route_cache=True)
"""Before Kuadrant's wasm: the edge headers guard and the body's `model` copied into the routing header."""

POST: Final = FilterModes(stage="post", request_body="BUFFERED", response_headers=True, response_body="STREAMED",
                          request_trailers=True, response_trailers=True, allow_mode_override=True, meters=True,
                          clears_route_cache=False)
"""After Kuadrant's wasm: metering, reservation, guardrails, provider key, rename, stream usage, settle. The
processor overrides the response body to BUFFERED for an answer the output guardrails may replace whole
(`buffered_response`): in STREAMED mode its head has left before the body is read."""

MODES: Final[dict[str, FilterModes]] = {"pre": PRE, "post": POST}


def stage_of(metadata: object) -> FilterModes | None:
    """The filter a stream belongs to, from its gRPC initial metadata; None when absent or unknown."""
    if not metadata:
        return None
    for key, value in metadata:  # type: ignore[attr-defined]
        if key == STAGE_METADATA:
            return MODES.get(value if isinstance(value, str) else bytes(value).decode("latin-1"))
    return None


def stage_from_protocol(first: Any) -> FilterModes | None:
    """The filter of a stream without `x-maas-stage` (Envoy Gateway), from its first message's `protocol_config`:
    a filter that never asks for the response body is the pre filter, one that does is the post filter. None when
    the message carries no protocol_config (Envoy before 1.33): such a stream is refused, never guessed."""
    if first is None or not first.HasField("protocol_config"):
        return None
    return PRE if first.protocol_config.response_body_mode == pm.ProcessingMode.NONE else POST


def buffered_response(modes: FilterModes) -> Any:
    """The `mode_override` for one exchange: the filter's own modes with the response body BUFFERED. Envoy
    replaces the whole processing mode with it (a field left out would be DEFAULT: trailers skipped), and
    honours it only in answer to a headers message, with `allow_mode_override` set."""
    send, skip = pm.ProcessingMode.SEND, pm.ProcessingMode.SKIP
    return pm.ProcessingMode(
        request_header_mode=send, request_body_mode=BODY_MODE_NUMBERS[modes.request_body],
        request_trailer_mode=send if modes.request_trailers else skip,
        response_header_mode=send if modes.response_headers else skip,
        response_body_mode=pm.ProcessingMode.BUFFERED,
        response_trailer_mode=send if modes.response_trailers else skip)


def overridden(modes: FilterModes, mode: Any) -> FilterModes:
    """`modes` after a `mode_override`, as Envoy applies one: every field replaced (a header mode DEFAULT is
    SEND for headers, SKIP for trailers). A body mode this table does not model is refused (ValueError)."""
    def body(number: int) -> BodyMode:
        if number not in _BODY_MODE_NAMES:
            raise ValueError(f"body mode {number} is not one the local Envoy side sends")
        return _BODY_MODE_NAMES[number]
    skip, send = pm.ProcessingMode.SKIP, pm.ProcessingMode.SEND
    return replace(modes, request_body=body(mode.request_body_mode), response_body=body(mode.response_body_mode),
                   response_headers=mode.response_header_mode != skip,
                   request_trailers=mode.request_trailer_mode == send,
                   response_trailers=mode.response_trailer_mode == send)
