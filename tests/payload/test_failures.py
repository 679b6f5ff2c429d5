"""Failures over real gRPC: Envoy closing a stream early, oversize bodies, a processor restarted mid-stream,
a processor that closes cleanly, and many concurrent streams."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from maasctl.payload import headers as hdr
from maasctl.payload.envoy import ProcessorFailure, channel, open_filter
from maasctl.payload.modes import BODY_MODE_NUMBERS, POST, PRE
from maasctl.payload.server import ProcessorServer, start_processor

from .conftest import LIMIT, PROVIDER_KEY, Running, StagesUnderTest, chat, request_headers

_STREAMED = pb.ProtocolConfiguration(request_body_mode=BODY_MODE_NUMBERS["STREAMED"])  # type: ignore[arg-type]


class TestClosedByEnvoy:
    """The client or upstream went away: Envoy resets the stream; the exchange settles once, as disconnected."""

    async def test_mid_request_body(self, processor: Running) -> None:
        call = pb_grpc.ExternalProcessorStub(processor.channel).Process(metadata=(("x-maas-stage", "post"),))
        await call.write(pb.ProcessingRequest(protocol_config=_STREAMED, request_headers=pb.HttpHeaders(
            headers=hdr.to_map(request_headers()))))
        await call.read()
        await call.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=b'{"model": ', end_of_stream=False)))
        held = await call.read()
        assert held.request_body.response.body_mutation.clear_body  # the chunk is held, nothing went upstream
        call.cancel()
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (499, "client_disconnect")

    async def test_mid_response_body(self, processor: Running) -> None:
        f = open_filter(processor.channel, POST)
        await f.request(request_headers(), chat("other"))
        await f.response_headers(200, [("content-type", "text/event-stream")])
        await f.response_chunk(b"data: {}\n\n", False)
        f.abort()
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (200, "client_disconnect")

    async def test_before_any_message(self, processor: Running) -> None:
        call = pb_grpc.ExternalProcessorStub(processor.channel).Process(metadata=(("x-maas-stage", "post"),))
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK
        assert processor.stages.exchanges == [] and processor.stages.finished == []


class TestOversize:
    """A body over the bound is refused by the pipeline's body stage (413); the processor holds at most the
    bound plus one byte, buffered or streamed."""

    @pytest.mark.parametrize("size", [LIMIT + 1, LIMIT * 3])
    async def test_buffered(self, processor: Running, size: int) -> None:
        f = open_filter(processor.channel, POST)
        out = await f.request(request_headers(), json.dumps({"pad": "p" * size}).encode())
        await f.aclose()
        assert out.immediate is not None and (out.immediate.status, out.immediate.details) == (413, "request_too_large")
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (413, "refused")

    async def test_streamed_refused_at_the_chunk_crossing_the_bound(self, processor: Running) -> None:
        call = pb_grpc.ExternalProcessorStub(processor.channel).Process(metadata=(("x-maas-stage", "post"),))
        await call.write(pb.ProcessingRequest(protocol_config=_STREAMED, request_headers=pb.HttpHeaders(
            headers=hdr.to_map(request_headers()))))
        await call.read()
        kinds = []
        for _ in range(5):
            await call.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * (LIMIT // 2))))
            reply = await call.read()
            kinds.append(reply.WhichOneof("response"))
            if kinds[-1] == "immediate_response":
                assert reply.immediate_response.status.code == 413
                break
        call.cancel()
        assert kinds == ["request_body", "request_body", "immediate_response"]

    @pytest.mark.parametrize("size", [LIMIT - 200, LIMIT])
    async def test_within_the_bound_passes(self, processor: Running, size: int) -> None:
        body = json.dumps({"pad": "p" * (size - 11)}).encode()
        f = open_filter(processor.channel, POST)
        out = await f.request(request_headers(), body)
        await f.aclose()
        assert out.immediate is None and out.body == body


@dataclass
class Restartable:
    stages: StagesUnderTest
    server: ProcessorServer
    channel: grpc.aio.Channel

    async def restart(self) -> None:
        """Stop the processor abruptly (no grace: streams are cut) and start a new one on the same port."""
        port = self.server.port
        await self.server.stop(0)
        self.server = await start_processor(self.stages, port=port, max_request_bytes=LIMIT)


@pytest.fixture
async def restartable() -> AsyncIterator[Restartable]:
    stages = StagesUnderTest()
    server = await start_processor(stages, max_request_bytes=LIMIT)
    it = Restartable(stages, server, channel(f"127.0.0.1:{server.port}"))
    try:
        yield it
    finally:
        await it.channel.close()
        await it.server.stop(0)


class TestProcessorRestarted:
    """The processor goes away mid-stream: Envoy sees a gRPC error and refuses (500) - the request is never
    served unmetered; the next request on the restarted processor is processed again."""

    async def test_mid_request(self, restartable: Restartable) -> None:
        stages = restartable.stages
        stages.hold = asyncio.Event()  # the body stage is still running when the processor stops
        f = open_filter(restartable.channel, POST)
        pending = asyncio.create_task(f.request(request_headers(), chat("other")))
        await stages.opened(1)
        await restartable.restart()
        with pytest.raises(ProcessorFailure) as failure:
            await pending
        assert failure.value.status == 500
        stages.hold.set()
        stages.hold = None
        again = open_filter(restartable.channel, POST)
        out = await again.request(request_headers(), chat("other"))
        await again.aclose()
        assert out.immediate is None and ("authorization", f"Bearer {PROVIDER_KEY}") in out.headers

    async def test_mid_response(self, restartable: Restartable) -> None:
        f = open_filter(restartable.channel, POST)
        await f.request(request_headers(), chat("other"))
        await f.response_headers(200, [("content-type", "text/event-stream")])
        await restartable.restart()
        with pytest.raises(ProcessorFailure):  # the gateway cuts the stream: the status went out already
            await f.response_chunk(b"data: {}\n\n", False)


class _CleanClose(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """A processor that reads the first message and ends the stream with OK: "continue without me"."""

    async def Process(self, requests: object, context: object) -> None:
        async for _ in requests:  # type: ignore[attr-defined]
            return


class TestCleanClose:
    """Envoy's protocol: a stream the processor closes cleanly means the rest goes through unmodified."""

    async def test_request_passes_unmodified(self) -> None:
        server = grpc.aio.server()
        pb_grpc.add_ExternalProcessorServicer_to_server(_CleanClose(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ch = channel(f"127.0.0.1:{port}")
        try:
            f = open_filter(ch, POST)
            out = await f.request(request_headers(), chat())
            head = await f.response_headers(200, [("x-a", "1")])
            assert (out.headers, out.body, out.immediate) == (request_headers(), chat(), None)
            assert head.headers == [("x-a", "1")] and not f.processed
            await f.aclose()
        finally:
            await ch.close()
            await server.stop(0)


class TestConcurrentStreams:
    """Streams are independent: each request gets its own mutations and its own single settle."""

    @pytest.mark.parametrize("streams", [16, 64])
    async def test_interleaved(self, processor: Running, streams: int) -> None:
        processor.stages.hold = asyncio.Event()  # every stream is inside the body stage at once

        async def one(i: int) -> tuple[list[tuple[str, str]], bytes]:
            pre = open_filter(processor.channel, PRE)
            routed = await pre.request(request_headers(), chat(f"m{i}"))
            await pre.aclose()
            post = open_filter(processor.channel, POST)
            await post.request(routed.headers, routed.body)
            await post.response_headers(200, [])
            out = await post.response_chunk(f"chunk {i}".encode(), True)
            await post.aclose()
            return routed.headers, out

        tasks = [asyncio.create_task(one(i)) for i in range(streams)]
        await processor.stages.opened(streams)
        processor.stages.hold.set()
        results = await asyncio.gather(*tasks)
        for i, (headers, out) in enumerate(results):
            assert [v for k, v in headers if k == "x-gateway-model-name"] == [f"m{i}"]
            assert out == f"chunk {i}".encode() + b"data: [DONE]\n\n"
        settled = await processor.stages.settled(streams)
        assert len({id(ex) for ex, _, _ in settled}) == streams
        assert {(status, t) for _, status, t in settled} == {(200, "complete")}
