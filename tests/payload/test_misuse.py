"""Protocol misuse over real gRPC: messages out of Envoy's order, missing ones, unknown stages.

Every case ends the stream with a gRPC error (Envoy with failure_mode_allow false answers 500 and forwards
nothing), and an exchange a metering stage opened is settled exactly once.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from maasctl.payload import headers as hdr
from maasctl.payload.modes import BODY_MODE_NUMBERS

from .conftest import Running, chat, request_headers


def _headers(eos: bool, extra: tuple[tuple[str, str], ...] = ()) -> Any:
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hdr.to_map(request_headers(extra=extra)),
                                                                end_of_stream=eos))


def _body(eos: bool = True) -> Any:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=chat("other"), end_of_stream=eos))


def _response_headers(status: str | None = "200") -> Any:
    items = [(":status", status)] if status else []
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hdr.to_map(items)))


_RESPONSE_BODY = pb.ProcessingRequest(response_body=pb.HttpBody(body=b"x", end_of_stream=True))
_TRAILERS = pb.ProcessingRequest(request_trailers=pb.HttpTrailers())


async def _run(processor: Running, stage: str | None, messages: list[Any], *,
               close: bool = False) -> tuple[grpc.StatusCode, int]:
    """Send the messages in order, reading each answer (then end the stream when `close`, as Envoy does after a
    complete exchange); the final status and how many answers came."""
    stub = pb_grpc.ExternalProcessorStub(processor.channel)
    call = stub.Process(metadata=(("x-maas-stage", stage),) if stage else ())
    answers = 0
    try:
        for message in messages:
            await call.write(message)
            reply = await call.read()
            if reply is grpc.aio.EOF:
                break
            answers += 1
        if close:
            await call.done_writing()
    except (grpc.aio.AioRpcError, grpc.aio.UsageError):
        pass
    code = await call.code()
    return code, answers


class TestOutOfOrder:
    """A message Envoy cannot send at that point: FAILED_PRECONDITION after the answers that were due."""

    @pytest.mark.parametrize(("messages", "answered", "settled"), [
        ([_body()], 0, False),  # body before headers
        ([_headers(False), _headers(False)], 1, True),  # headers twice
        ([_headers(True), _body()], 1, True),  # a body after headers said end_of_stream
        ([_headers(False), _body(), _TRAILERS], 2, True),  # trailers after a body at end_of_stream
        ([_headers(True), _RESPONSE_BODY], 1, True),  # response body before response headers
        ([_headers(True), _response_headers(None)], 1, True),  # response headers without :status
        ([pb.ProcessingRequest()], 0, False),  # no message at all
    ], ids=["body-first", "headers-twice", "body-after-eos", "trailers-after-eos", "response-body-first",
            "no-status", "empty"])
    async def test_out_of_order(self, processor: Running, messages: list[Any], answered: int,
                                settled: bool) -> None:
        code, answers = await _run(processor, "post", messages)
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert answers == answered
        if settled:
            [(_, status, termination)] = await processor.stages.settled()
            assert (status, termination) == (500, "refused")
        else:
            assert processor.stages.finished == []


class TestMissing:
    """A message Envoy must send first did not come: the stages that needed it never ran, nothing is passed."""

    async def test_response_headers_without_the_request_body(self, processor: Running) -> None:
        code, answers = await _run(processor, "post", [_headers(False), _response_headers()])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)
        assert processor.stages.exchanges[0].body == b""  # the body stages never ran
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (500, "refused")

    async def test_buffered_body_not_at_end_without_trailers(self, processor: Running) -> None:
        code, answers = await _run(processor, "pre", [_headers(False), _body(eos=False)])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)

    async def test_pre_stream_gets_no_response_messages(self, processor: Running) -> None:
        code, answers = await _run(processor, "pre", [_headers(True), _response_headers()])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)

    async def test_message_after_an_immediate_response(self, processor: Running) -> None:
        code, answers = await _run(processor, "post", [_headers(False, (("x-refuse", "1"),)), _body()])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)
        [(_, status, termination)] = await processor.stages.settled()  # settled once, as refused by the stage
        assert (status, termination) == (400, "refused")


class TestStage:
    """The stage comes from the filter's initial metadata; a stream without a known one is refused at once."""

    @pytest.mark.parametrize("stage", [None, "", "middle", "PRE"])
    async def test_unknown_stage(self, processor: Running, stage: str | None) -> None:
        code, answers = await _run(processor, stage, [_headers(True)])
        assert (code, answers) == (grpc.StatusCode.INVALID_ARGUMENT, 0)
        assert processor.stages.exchanges == []


def _with_protocol(message: Any, response_body_mode: int) -> Any:
    """`message` carrying the `protocol_config` Envoy (1.33+) puts on a stream's first message."""
    message.protocol_config.CopyFrom(pb.ProtocolConfiguration(request_body_mode=BODY_MODE_NUMBERS["BUFFERED"],
                                                               response_body_mode=response_body_mode))
    return message


class TestStageFromProtocol:
    """Envoy Gateway's extProc has no initial metadata: the first message's protocol_config names the filter
    (only the post filter asks for the response body), and a stream with neither is refused, never guessed."""

    @pytest.mark.parametrize("mode", [1, 2, 3, 4], ids=["streamed", "buffered", "partial", "full-duplex"])
    async def test_a_filter_asking_for_the_response_body_is_post(self, processor: Running, mode: int) -> None:
        code, answers = await _run(processor, None, [_with_protocol(_headers(True), mode), _response_headers(),
                                                     _RESPONSE_BODY], close=True)
        assert answers == 3  # the post stage answers response messages
        assert code == grpc.StatusCode.OK
        [(_, status, _termination)] = await processor.stages.settled()  # post meters: settled once
        assert status == 200

    async def test_a_filter_never_asking_for_the_response_body_is_pre(self, processor: Running) -> None:
        code, answers = await _run(processor, None, [_with_protocol(_headers(True), 0), _response_headers()])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)  # a pre stream gets no response messages

    async def test_metadata_wins_over_protocol_config(self, processor: Running) -> None:
        code, answers = await _run(processor, "pre", [_with_protocol(_headers(True), 2), _response_headers()])
        assert (code, answers) == (grpc.StatusCode.FAILED_PRECONDITION, 1)
