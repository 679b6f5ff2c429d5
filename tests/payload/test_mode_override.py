"""An answer the output guardrails read whole keeps their status through ext_proc.

In STREAMED response mode the head has gone before the body is read, so a guardrail's refusal would reach the
client under the upstream's 200. For an answer the output stages may replace (`ResponsePass.whole`) the
processor answers the response headers with a `mode_override` to BUFFERED (honoured by Envoy in answer to
headers only, with `allow_mode_override`), and answers the whole body with an ImmediateResponse carrying the
replacement's status, headers and body. Envoy's local reply then replaces the held head. Every other answer
streams as before. The Envoy side here (`payload/envoy.py`) honours the override as Envoy does, or ignores it
when the filter does not allow it (then a replaced head cuts the stream: never the refusal under a 200).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from maasctl.builders.envoyfilter import build_envoy_filter
from maasctl.builders.extensionpolicy import build_extension_policy
from maasctl.builders.payloadwiring import ALLOW_MODE_OVERRIDE, ProcessorWiring
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.payload import headers as hdr
from maasctl.payload.envoy import Immediate, ProcessorFailure, open_filter
from maasctl.payload.modes import MODES, POST, PRE, buffered_response, overridden

from .conftest import Guarded, Running, chat, request_headers

JSON = [("content-type", "application/json")]
FINE = b'{"choices": [{"message": {"content": "fine"}}]}'
BLOCKED = b'{"choices": [{"message": {"content": "FORBIDDEN"}}]}'


async def _answer(processor: Running, model: str, body: bytes, modes: Any = POST) -> tuple[Any, bytes | Immediate]:
    f = open_filter(processor.channel, modes)
    await f.request(request_headers(), chat(model))
    head = await f.response_headers(200, [*JSON, ("content-length", str(len(body)))])
    if f.buffers_response:
        out: bytes | Immediate = await f.response_body(body)
    else:
        out = await f.response_chunk(body, False) + await f.response_chunk(b"", True)
    await f.aclose()
    return head, out


class TestGuardedAnswer:
    """Through the local Envoy side: the guarded answer is asked whole; a refusal is the client's answer."""

    async def test_a_passing_answer_is_sent_as_is(self, processor: Running) -> None:
        head, out = await _answer(processor, "guarded-model", FINE)
        assert head.immediate is None and out == FINE
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (200, "complete")

    async def test_a_blocked_answer_is_the_refusal_with_its_status(self, processor: Running) -> None:
        _, out = await _answer(processor, "guarded-model", BLOCKED)
        assert isinstance(out, Immediate)
        assert (out.status, out.body, out.details) == (400, Guarded.refusal, "guardrail_blocked")
        assert ("x-maas-guardrail", "safety/self check output") in out.headers
        assert all(k != "content-length" for k, _ in out.headers)  # Envoy sets it for its local reply
        [(_, status, termination)] = await processor.stages.settled()  # once; the record reads the rails' verdict
        assert (status, termination) == (200, "complete")

    @pytest.mark.parametrize("model", ["public-model", "other"])
    async def test_an_unguarded_answer_still_streams(self, processor: Running, model: str) -> None:
        f = open_filter(processor.channel, POST)
        await f.request(request_headers(), chat(model))
        await f.response_headers(200, [("content-type", "text/event-stream")])
        assert not f.buffers_response
        assert await f.response_chunk(b"data: internal-model\n\n", False) == b"data: public-model\n\n"
        await f.response_chunk(b"", True)
        await f.aclose()

    async def test_a_filter_that_ignores_the_override_cuts_a_refused_stream(self, processor: Running) -> None:
        strict = replace(POST, allow_mode_override=False)  # an Envoy rendered without allow_mode_override
        head, out = await _answer(processor, "guarded-model", FINE, strict)
        assert head.immediate is None and out == FINE  # held to the end, then passed whole
        with pytest.raises(ProcessorFailure) as cut:
            await _answer(processor, "guarded-model", BLOCKED, strict)
        assert cut.value.status == 500  # Envoy resets the stream: the refusal never rides under a 200


async def _raw(processor: Running, messages: list[Any]) -> list[Any]:
    call = pb_grpc.ExternalProcessorStub(processor.channel).Process(metadata=(("x-maas-stage", "post"),))
    replies = []
    for message in messages:
        await call.write(message)
        replies.append(await call.read())
    call.cancel()
    return replies


def _head(model: str) -> list[Any]:
    return [pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hdr.to_map(request_headers()))),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=chat(model), end_of_stream=True)),
            pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hdr.to_map([(":status", "200"), *JSON])))]


class TestWhatEnvoyGets:
    """The messages on the wire, as a real Envoy sees them."""

    async def test_the_override_is_the_filters_modes_with_a_buffered_response_body(self, processor: Running) -> None:
        *_, head = await _raw(processor, _head("guarded-model"))
        assert head.WhichOneof("response") == "response_headers" and head.HasField("mode_override")
        mode = head.mode_override
        assert mode.response_body_mode == pm.ProcessingMode.BUFFERED
        send = pm.ProcessingMode.SEND  # every other field stated: Envoy replaces the whole mode
        assert (mode.request_header_mode, mode.response_header_mode, mode.request_trailer_mode,
                mode.response_trailer_mode, mode.request_body_mode) == (send, send, send, send,
                                                                        pm.ProcessingMode.BUFFERED)

    @pytest.mark.parametrize("model", ["public-model", "other"])
    async def test_no_override_for_an_answer_no_rail_replaces(self, processor: Running, model: str) -> None:
        *_, head = await _raw(processor, _head(model))
        assert not head.HasField("mode_override")

    @pytest.mark.parametrize("answer, kind", [(BLOCKED, "immediate_response"), (FINE, "response_body")])
    async def test_the_buffered_body_is_answered_whole(self, processor: Running, answer: bytes, kind: str) -> None:
        *_, body = await _raw(processor, [*_head("guarded-model"), pb.ProcessingRequest(
            response_body=pb.HttpBody(body=answer, end_of_stream=True))])
        assert body.WhichOneof("response") == kind
        if kind == "immediate_response":
            assert body.immediate_response.status.code == 400 and body.immediate_response.body == Guarded.refusal
        else:
            assert not body.response_body.response.HasField("body_mutation")  # passed as it came

    async def test_a_refusal_found_at_the_trailers_is_still_a_refusal(self, processor: Running) -> None:
        *_, body, trailers = await _raw(processor, [
            *_head("guarded-model"), pb.ProcessingRequest(response_body=pb.HttpBody(body=BLOCKED)),
            pb.ProcessingRequest(response_trailers=pb.HttpTrailers())])
        assert body.WhichOneof("response") == "response_body"
        assert trailers.WhichOneof("response") == "immediate_response"
        assert trailers.immediate_response.status.code == 400

    async def test_a_bodyless_answer_the_rails_refuse(self, processor: Running) -> None:
        *_, head = await _raw(processor, [*_head("guarded-model")[:2], pb.ProcessingRequest(
            response_headers=pb.HttpHeaders(headers=hdr.to_map([(":status", "200"), *JSON]), end_of_stream=True))])
        assert head.WhichOneof("response") == "response_headers"  # nothing FORBIDDEN in no body: passed
        [(_, status, termination)] = await processor.stages.settled()
        assert (status, termination) == (200, "complete")


class TestModes:
    """`mode_override` as Envoy applies it: the whole mode replaced, DEFAULT header modes as Envoy reads them."""

    def test_the_override_applied_is_the_filter_with_a_buffered_response(self) -> None:
        assert overridden(POST, buffered_response(POST)) == replace(POST, response_body="BUFFERED")

    def test_fields_left_out_are_envoys_defaults(self) -> None:
        got = overridden(POST, pm.ProcessingMode())
        assert (got.request_body, got.response_body) == ("NONE", "NONE")
        assert got.response_headers and not got.request_trailers and not got.response_trailers

    @pytest.mark.parametrize("mode", [pm.ProcessingMode.BUFFERED_PARTIAL, pm.ProcessingMode.FULL_DUPLEX_STREAMED])
    def test_a_body_mode_the_local_envoy_does_not_send_is_refused(self, mode: int) -> None:
        with pytest.raises(ValueError):
            overridden(POST, pm.ProcessingMode(response_body_mode=mode))  # type: ignore[arg-type]


GW = GatewayRef("openshift-ingress", "maas-default-gateway")


class TestRenderedFilters:
    """The rendered filters allow the override exactly where the processor sends one (the post stage)."""

    def test_the_table_is_the_processors(self) -> None:
        assert {stage: modes.allow_mode_override for stage, modes in MODES.items()} == ALLOW_MODE_OVERRIDE
        assert not PRE.allow_mode_override and POST.allow_mode_override

    def test_istio_and_envoy_gateway_render_it(self) -> None:
        wiring = ProcessorWiring(GW, "uid", ObjectRef("opendatahub", "maas-payload-processor"))
        filters = [p["patch"]["value"] for p in build_envoy_filter(wiring)["spec"]["configPatches"]
                   if p["applyTo"] == "HTTP_FILTER"]
        rendered = {f["name"].rsplit("-", 1)[-1]: f["typed_config"]["allow_mode_override"] for f in filters}
        assert rendered == ALLOW_MODE_OVERRIDE
        ext = build_extension_policy(wiring)["spec"]["extProc"]
        assert [e["processingMode"]["allowModeOverride"] for e in ext] == [False, True]  # pre, post
        assert json.dumps(ext).count("allowModeOverride") == 2

