"""The two ext_proc filters of a managed Gateway and the messages Envoy sends each (its processing mode).

Both run on one processor; the filter names its stage in the gRPC initial metadata (`x-maas-stage`), which the
Envoy filter's `grpc_service.initial_metadata` sets (Istio). Envoy Gateway cannot set it: there the first message's
`protocol_config` tells (`contract.processor_stages`: only the post filter asks for the response body). The
modes are `contract.processor_stages`' table, the one the install builders render, so the processor, the Envoy
side of the local gateway and the rendered filters agree; here they become Envoy's protobuf messages.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm

from maasctl.contract.processor_stages import MODES, POST, PRE, STAGE_METADATA_KEY, BodyMode, FilterModes, Stage

__all__ = ["BODY_MODE_NUMBERS", "MODES", "POST", "PRE", "STAGE_METADATA", "BodyMode", "FilterModes", "Stage",
           "buffered_response", "overridden", "stage_from_protocol", "stage_of"]

STAGE_METADATA: Final = STAGE_METADATA_KEY

BODY_MODE_NUMBERS: Final[dict[BodyMode, int]] = {
    "NONE": pm.ProcessingMode.NONE, "STREAMED": pm.ProcessingMode.STREAMED, "BUFFERED": pm.ProcessingMode.BUFFERED}
"""`ProcessingMode.BodySendMode` as it travels (`protocol_config`, `mode_override`)."""
_BODY_MODE_NAMES: Final[dict[int, BodyMode]] = {number: name for name, number in BODY_MODE_NUMBERS.items()}


def stage_of(metadata: object) -> FilterModes | None:
    """The filter a stream belongs to, from its gRPC initial metadata; None when absent or unknown."""
    if not metadata:
        return None
    for key, value in metadata:  # type: ignore[attr-defined]
        if key == STAGE_METADATA:
            name = value if isinstance(value, str) else bytes(value).decode("latin-1")
            return next((m for stage, m in MODES.items() if stage == name), None)
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
