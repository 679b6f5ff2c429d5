"""One ext_proc stream = one HTTP request: which message may come when, and what each is answered with.

Envoy's order for the modes in `modes`: request_headers, request_body (one buffered message; or chunks when
the filter was configured STREAMED), request_trailers, response_headers, response_body chunks, response_trailers.
Anything else is protocol misuse: the stream ends with a gRPC error, which Envoy (failure_mode_allow false)
turns into a 500 - the request is never forwarded unprocessed, and a metering stage still settles its
exchange (exactly one `finish`). A stream Envoy closes early (client gone, upstream reset) settles too.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Final

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2

from maasctl.contract.errors import Refusal
from maasctl.payload import headers as hdr
from maasctl.payload.modes import BODY_MODE_NUMBERS, FilterModes, buffered_response
from maasctl.payload.stages import Headers, Pipeline, RefusalLike, ResponsePass, Termination

__all__ = ["ProtocolError", "StreamMachine"]

_STREAMED: Final = BODY_MODE_NUMBERS["STREAMED"]  # as protocol_config reports it
_CLIENT_GONE: Final = 499


class ProtocolError(Exception):
    """A message Envoy cannot send at this point for the configured modes (or one the processor cannot honour)."""


class _Phase(enum.Enum):
    HEAD = "waiting for request_headers"
    BODY = "in the request body"
    REQUEST_TRAILERS = "waiting for request_trailers"
    UPSTREAM = "waiting for response_headers"
    RESPONSE = "in the response body"
    DONE = "done"


class StreamMachine:
    """Feed it each ProcessingRequest (`handle`), then `close` once when the stream ends, however it ends."""

    def __init__(self, pipeline: Pipeline, modes: FilterModes, max_request_bytes: int) -> None:
        self.pipeline = pipeline
        self.modes = modes
        self.max_request_bytes = max_request_bytes
        self.phase = _Phase.HEAD
        self.ex: Any = None
        self.refused: RefusalLike | None = None
        self._streamed_body = modes.request_body == "STREAMED"
        self._sent: Headers = ()
        self._body = bytearray()
        self._original_body = b""
        self._response: ResponsePass | None = None
        self._head: tuple[int, Headers] = (0, ())  # the response head as answered (the client's, unless replaced)
        self._status = 0
        self._finished = False
        self.dropped_tail = 0

    @property
    def done(self) -> bool:
        return self.phase is _Phase.DONE

    # -- messages ----------------------------------------------------------------------------------------

    async def handle(self, req: Any) -> Any:
        """The ProcessingResponse for one ProcessingRequest; ProtocolError when it cannot come now."""
        kind = req.WhichOneof("request")
        if req.HasField("protocol_config"):
            self._streamed_body = req.protocol_config.request_body_mode == _STREAMED
        if kind == "request_headers":
            return await self._request_headers(req.request_headers)
        if kind == "request_body":
            return await self._request_body(req.request_body)
        if kind == "request_trailers":
            return self._request_trailers()
        if kind == "response_headers":
            return await self._response_headers(req.response_headers)
        if kind == "response_body":
            return await self._response_body(req.response_body)
        if kind == "response_trailers":
            return await self._response_trailers()
        raise ProtocolError(f"message {kind or 'with no request'} is not handled")

    def _expect(self, *phases: _Phase, message: str) -> None:
        if self.phase not in phases:
            raise ProtocolError(f"{message} {self.phase.value}")

    async def _request_headers(self, msg: Any) -> Any:
        self._expect(_Phase.HEAD, message="request_headers")
        sent = hdr.from_map(msg.headers)
        path = (hdr.header(sent, ":path") or "/").encode("latin-1")
        raw_path, _, query = path.partition(b"?")
        plain = [(k, v) for k, v in sent if not k.startswith(":")]
        authority = hdr.header(sent, ":authority")
        if authority is not None and hdr.header(plain, "host") is None:
            plain.insert(0, ("host", authority))
        self._sent = plain
        self.ex = self.pipeline.exchange(hdr.header(sent, ":method") or "GET", raw_path, query.decode("latin-1"), plain,
                                         hdr.header(sent, ":scheme") or "http")
        refusal = await self.pipeline.request_head(self.ex, self.modes.stage)
        if refusal is not None:
            return await self._refuse(refusal)
        if msg.end_of_stream:  # no body: the body stages run on an empty one now
            return await self._complete_body(lambda common: pb.ProcessingResponse(
                request_headers=pb.HeadersResponse(response=common)))
        self.phase = _Phase.BODY
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())

    async def _request_body(self, msg: Any) -> Any:
        self._expect(_Phase.BODY, message="request_body")
        if len(self._body) + len(msg.body) > self.max_request_bytes:
            # hold one byte more than the bound and let the pipeline's body stage refuse it (413)
            self._body.extend(msg.body[: self.max_request_bytes + 1 - len(self._body)])
            refusal = await self.pipeline.request_body(self.ex, bytes(self._body), self.modes.stage)
            if refusal is None:
                raise ProtocolError("a body over the processor's bound was accepted by the stages")
            return await self._refuse(refusal)
        self._body.extend(msg.body)
        if self._streamed_body and not msg.end_of_stream:  # hold the chunk: the whole body goes with the last
            return pb.ProcessingResponse(request_body=pb.BodyResponse(response=pb.CommonResponse(
                body_mutation=pb.BodyMutation(clear_body=True))))
        if not msg.end_of_stream:
            if self._streamed_body or not self.modes.request_trailers:
                raise ProtocolError("a buffered request body not at end of stream, and no trailers are sent")
            self.phase = _Phase.REQUEST_TRAILERS  # buffered body complete, trailers follow
        return await self._complete_body(lambda common: pb.ProcessingResponse(
            request_body=pb.BodyResponse(response=common)))

    async def _complete_body(self, wrap: Any) -> Any:
        body = bytes(self._body)
        self._original_body = body
        refusal = await self.pipeline.request_body(self.ex, body, self.modes.stage)
        if refusal is not None:
            return await self._refuse(refusal)
        upstream = self.pipeline.upstream_request(self.ex)
        common = pb.CommonResponse()
        changed = hdr.diff(self._sent, list(upstream.headers))
        if changed is not None:
            if self._streamed_body and self.phase is _Phase.BODY:
                raise ProtocolError("the stages changed request headers after a streamed body's headers went on")
            common.header_mutation.CopyFrom(changed)
            common.clear_route_cache = self.modes.clears_route_cache
        if upstream.body != body or (self._streamed_body and body):
            common.body_mutation.body = upstream.body
        if self.phase is not _Phase.REQUEST_TRAILERS:
            self.phase = _Phase.UPSTREAM if self.modes.response_headers else _Phase.DONE
        return wrap(common)

    def _request_trailers(self) -> Any:
        self._expect(_Phase.REQUEST_TRAILERS, message="request_trailers")
        self.phase = _Phase.UPSTREAM if self.modes.response_headers else _Phase.DONE
        return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())

    async def _response_headers(self, msg: Any) -> Any:
        self._expect(_Phase.UPSTREAM, message="response_headers")
        sent = hdr.from_map(msg.headers)
        try:
            self._status = int(hdr.header(sent, ":status") or "")
        except ValueError:
            raise ProtocolError("response_headers without a valid :status") from None
        plain = [(k, v) for k, v in sent if not k.startswith(":")]
        self._response = response = self.pipeline.response(self.ex, self._status, plain)
        self._head = (response.status, list(response.headers))
        common = pb.CommonResponse()
        changed = hdr.diff(plain, list(response.headers))
        if changed is not None:
            common.header_mutation.CopyFrom(changed)
        reply = pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=common))
        if msg.end_of_stream:  # a bodyless answer: the output stages see it whole now
            tail = await response.close()
            if self._replaced():
                return await self._replace(tail)
            await self._settle("complete")
        else:
            self.phase = _Phase.RESPONSE
            if response.whole and self.modes.response_body == "STREAMED" and self.modes.allow_mode_override:
                # the output stages may answer with a head of their own once they read the whole body: Envoy
                # holds this head until the buffered body is answered (an Envoy that ignores the override
                # streams on, and a replaced head then resets the stream: never the refusal under a 200)
                reply.mode_override.CopyFrom(buffered_response(self.modes))
        return reply

    async def _response_body(self, msg: Any) -> Any:
        self._expect(_Phase.RESPONSE, message="response_body")
        assert self._response is not None
        out = await self._response.feed(bytes(msg.body))
        if msg.end_of_stream:
            out += await self._response.close()
            if self._replaced():
                return await self._replace(out)  # the output stages answered with their own head
            await self._settle(self._response.termination)  # "truncated" when the answer ended before its end
        common = pb.CommonResponse()
        if out != msg.body:
            common.body_mutation.body = out
        return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))

    async def _response_trailers(self) -> Any:
        self._expect(_Phase.RESPONSE, message="response_trailers")
        assert self._response is not None
        # the body already ended without end_of_stream: bytes the stages still held have no message left to
        # ride on (a trailers answer carries no body) - counted, not sent; a replaced head still refuses
        tail = await self._response.close()
        if self._replaced():
            return await self._replace(tail)
        self.dropped_tail = len(tail)
        await self._settle(self._response.termination)
        return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())

    def _replaced(self) -> bool:
        assert self._response is not None
        return (self._response.status, list(self._response.headers)) != self._head

    async def _replace(self, body: bytes) -> Any:
        """The answer the output stages put in the upstream's place (a guardrail's refusal): an immediate
        response with their status, headers and body. Envoy sends it as a local reply while it still holds the
        head (BUFFERED), and resets the stream once the head has gone (STREAMED, or after trailers): the
        refusal never reaches the client under the upstream's status."""
        assert self._response is not None
        status, headers = self._response.status, list(self._response.headers)
        self.refused = Refusal(status, _code_of(body), "the output stages replaced the answer", dict(headers),
                               raw_body=body)
        await self._settle("complete")  # the record says which refusal (the guardrails check's client status)
        return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=hdr.mutation((k, v, False) for k, v in headers if k != "content-length"),
            body=body, details=self.refused.code))

    async def _refuse(self, refusal: RefusalLike) -> Any:
        self.refused = refusal
        await self._settle("refused", refusal.status)
        extra = [(k.lower(), v) for k, v in refusal.headers.items()]
        if not any(k == "content-type" for k, _ in extra):  # the body is the data plane's JSON error
            extra.insert(0, ("content-type", "application/json"))
        return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=refusal.status),
            headers=hdr.mutation((k, v, False) for k, v in extra),
            body=refusal.body, details=refusal.code))

    # -- the end -----------------------------------------------------------------------------------------

    async def _settle(self, termination: Termination, status: int | None = None) -> None:
        self.phase = _Phase.DONE
        if self._finished or self.ex is None:
            return
        self._finished = True
        if self.modes.meters:
            await self.pipeline.finish(self.ex, status if status is not None else self._status, termination)

    async def close(self, error: bool = False) -> None:
        """The stream ended. Settle an exchange still open: refused when the processor failed it (Envoy
        answers 500), else closed by Envoy before the end (the client or the upstream went away)."""
        if self.phase is _Phase.DONE:
            return
        if error:
            await self._settle("refused", 500)
        else:
            await self._settle("client_disconnect", self._status or _CLIENT_GONE)


def _code_of(body: bytes) -> str:
    """The error code of the data plane's JSON error body (`contract.errors.error_body`), for metrics."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "output_replaced"
    return code if isinstance(code, str) and code.isidentifier() else "output_replaced"
