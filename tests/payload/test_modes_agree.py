"""The filters the controller renders and the messages the processor (and the local gateway's Envoy side) expect
are one table: a mode changed on one side only would leave Envoy sending messages the processor refuses."""

from __future__ import annotations

import pytest

from maasctl.builders.payloadwiring import PROCESSING_MODES
from maasctl.payload.modes import MODES, FilterModes


def _rendered(modes: FilterModes) -> dict[str, str]:
    send = {True: "SEND", False: "SKIP"}
    return {
        "request_header_mode": "SEND",
        "request_body_mode": modes.request_body,
        "request_trailer_mode": send[modes.request_trailers],
        "response_header_mode": send[modes.response_headers],
        "response_body_mode": modes.response_body,
        "response_trailer_mode": send[modes.response_trailers],
    }


@pytest.mark.parametrize("stage", ["pre", "post"])
def test_rendered_modes_are_the_processors(stage: str) -> None:
    assert PROCESSING_MODES[stage] == _rendered(MODES[stage])  # type: ignore[index]


def test_both_sides_know_the_same_stages() -> None:
    assert set(PROCESSING_MODES) == set(MODES)
