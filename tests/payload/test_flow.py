"""The processor over real gRPC, driven by the Envoy side (`payload.envoy`) as Envoy drives it."""

from __future__ import annotations

import json

import pytest

from maasctl.payload.envoy import ProcessorFailure, open_filter
from maasctl.payload.modes import POST, PRE, FilterModes

from .conftest import PROVIDER_KEY, Running, chat, request_headers


def _value(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k == name]


class TestPreStage:
    """pre: the body's model becomes the routing header and Envoy is asked to match the route again."""

    async def test_model_header_and_route_cache(self, processor: Running) -> None:
        f = open_filter(processor.channel, PRE)
        out = await f.request(request_headers(), chat("granite"))
        await f.aclose()
        assert out.immediate is None
        assert _value(out.headers, "x-gateway-model-name") == ["granite"]
        assert out.clear_route_cache
        assert out.body == chat("granite")  # pre does not edit the body
        assert processor.stages.exchanges[0].roles == ["pre"]

    async def test_no_model_no_mutation_no_route_clear(self, processor: Running) -> None:
        f = open_filter(processor.channel, PRE)
        out = await f.request(request_headers(path="/v1/models", method="GET"), b"")
        await f.aclose()
        assert out.immediate is None and not out.clear_route_cache
        assert out.headers == request_headers(path="/v1/models", method="GET")

    async def test_pre_never_meters(self, processor: Running) -> None:
        f = open_filter(processor.channel, PRE)
        await f.request(request_headers(), chat())
        await f.aclose()
        assert processor.stages.finished == []


class TestPostStage:
    """post: credential swap, identity removed, rename both ways, stream edits, one settle per request."""

    async def test_request_mutations(self, processor: Running) -> None:
        f = open_filter(processor.channel, POST)
        out = await f.request(request_headers(), chat("public-model"))
        assert _value(out.headers, "authorization") == [f"Bearer {PROVIDER_KEY}"]
        assert _value(out.headers, "x-maas-identity") == []
        assert not out.clear_route_cache  # routing is done by the time post runs
        assert json.loads(out.body)["model"] == "internal-model"
        assert dict(out.headers)[":path"] == "/v1/chat/completions"  # the route rewrites, not the processor
        head = await f.response_headers(200, [("content-type", "text/event-stream"), ("content-length", "99")])
        assert _value(head.headers, "x-processed") == ["post"] and _value(head.headers, "content-length") == []
        parts = [await f.response_chunk(b'data: {"model":"internal-model"}\n\n', False),
                 await f.response_chunk(b"data: usage {}\n\n", False),
                 await f.response_chunk(b"", True)]
        await f.aclose()
        assert parts == [b'data: {"model":"public-model"}\n\n', b"", b"data: [DONE]\n\n"]
        [(ex, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (200, "complete") and ex.roles == ["post"]

    @pytest.mark.parametrize("with_trailers", [False, True])
    async def test_request_trailers_and_response_trailers(self, processor: Running, with_trailers: bool) -> None:
        f = open_filter(processor.channel, POST)
        trailers = [("x-checksum", "abc")] if with_trailers else []
        out = await f.request(request_headers(), chat("other"), trailers)
        assert out.immediate is None and processor.stages.exchanges[0].body == chat("other")
        await f.response_headers(200, [("content-type", "application/json")])
        await f.response_chunk(b'{"usage":{}}', False)
        await f.response_trailers([("grpc-status", "0")])
        await f.aclose()
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (200, "complete")

    async def test_bodyless_request_runs_body_stages_on_empty_body(self, processor: Running) -> None:
        f = open_filter(processor.channel, POST)
        out = await f.request(request_headers(path="/v1/models", method="GET"), b"")
        head = await f.response_headers(204, [], end_of_stream=True)
        await f.aclose()
        assert _value(out.headers, "authorization") == [f"Bearer {PROVIDER_KEY}"]
        assert head.status == 204
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (204, "complete")


STREAMED_PRE = FilterModes(stage="pre", request_body="STREAMED", response_headers=False, response_body="NONE",
                           request_trailers=False, response_trailers=False, meters=False, clears_route_cache=True)


class TestStreamedRequestBody:
    """A filter configured STREAMED: chunks are held (cleared) and the whole body rides on the last one; a header
    change after the headers went upstream cannot be honoured, so the processor fails closed (Envoy: 500)."""

    async def test_chunks_held_and_sent_whole(self, processor: Running) -> None:
        body = json.dumps({"pad": "p" * 3000}).encode()
        f = open_filter(processor.channel, STREAMED_PRE)
        f.chunk_bytes = 700
        out = await f.request(request_headers(), body)
        await f.aclose()
        assert out.body == body and out.immediate is None
        assert processor.stages.exchanges[0].body == body

    async def test_header_change_after_streamed_body_fails_closed(self, processor: Running) -> None:
        f = open_filter(processor.channel, STREAMED_PRE)
        f.chunk_bytes = 10
        with pytest.raises(ProcessorFailure) as failure:
            await f.request(request_headers(), chat("granite"))
        await f.aclose()
        assert failure.value.status == 500


class TestRefusals:
    """A stage's refusal is Envoy's immediate response; a metering stage settles it once as refused."""

    @pytest.mark.parametrize(("extra", "model", "status", "code"), [
        ((("x-refuse", "1"),), "public-model", 400, "forbidden_header"),
        ((), "refused-model", 403, "unentitled"),
    ])
    @pytest.mark.parametrize("modes", [PRE, POST], ids=["pre", "post"])
    async def test_refusal(self, processor: Running, modes: FilterModes, extra: tuple[tuple[str, str], ...],
                           model: str, status: int, code: str) -> None:
        f = open_filter(processor.channel, modes)
        out = await f.request(request_headers(extra=extra), chat(model))
        await f.aclose()
        assert out.immediate is not None
        assert (out.immediate.status, out.immediate.details) == (status, code)
        assert json.loads(out.immediate.body) == {"error": {"code": code}}
        assert ("content-type", "application/json") in out.immediate.headers
        if modes.meters:
            [(_, settled, termination)] = await processor.stages.settled()
            assert (settled, termination) == (status, "refused")
        else:
            assert processor.stages.finished == []
