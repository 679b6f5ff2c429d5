"""The Envoy side of ext_proc, for the local gateway and the processor's tests: one filter, one stream per request.

It sends what Envoy's ext_proc filter sends for a `FilterModes` (request_headers, the buffered request body,
request trailers, response headers, each response chunk, response trailers - waiting for each answer, as the
STREAMED and BUFFERED modes do) and applies the answers as Envoy documents them: header mutations (default
mutation rules, `headers.apply_mutation`), body replacement or clearing, an immediate response (the request ends
there), `clear_route_cache` (reported to the caller, which matches the route again).

failure_mode_allow is false: a gRPC error or a stream the processor cannot be reached on becomes a 500
(`ProcessorFailure`), a message timeout a 504 - never a request forwarded unprocessed. A stream the processor
closes cleanly means "continue without me" (Envoy's protocol) and the rest is forwarded unmodified.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from maasctl.payload import headers as hdr
from maasctl.payload.modes import BODY_MODE_NUMBERS, STAGE_METADATA, FilterModes, overridden

__all__ = ["BUFFER_LIMIT", "Immediate", "ProcessorFailure", "RequestOutcome", "ResponseHead", "channel",
           "open_filter"]

BUFFER_LIMIT: Final = 8 * 1024 * 1024
"""What this Envoy buffers of a BUFFERED response body (Envoy's `per_connection_buffer_limit_bytes`): more is
a 500, as Envoy answers a buffer overflow before the head has gone."""
_HEADERS: Final = frozenset({"request_headers", "response_headers"})


class ProcessorFailure(Exception):
    """The processor failed this request: Envoy (failure_mode_allow false) answers `status` itself."""

    def __init__(self, status: int, details: str) -> None:
        super().__init__(details)
        self.status = status
        self.details = details


@dataclass(frozen=True)
class Immediate:
    """The processor's own answer to the caller (a stage's refusal)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    details: str


@dataclass
class RequestOutcome:
    """The request after the filter: forward `headers` + `body` (route again if `clear_route_cache`), or answer
    `immediate`."""

    headers: list[tuple[str, str]]
    body: bytes
    immediate: Immediate | None = None
    clear_route_cache: bool = False


@dataclass
class ResponseHead:
    status: int
    headers: list[tuple[str, str]]
    immediate: Immediate | None = None


def channel(target: str) -> grpc.aio.Channel:
    """A channel to `grpc://host:port` (or `host:port`); reused by every stream of one gateway."""
    address = target.removeprefix("grpc://")
    return grpc.aio.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * 1024 * 1024),
                                                       ("grpc.max_receive_message_length", 64 * 1024 * 1024)])


@dataclass
class FilterStream:
    """One request's stream through one filter. Use `open_filter`; call the steps in order, then `aclose`."""

    call: Any
    modes: FilterModes  # the filter's, until the processor overrides them for this request (`mode_override`)
    timeout: float
    chunk_bytes: int = 64 * 1024  # STREAMED request bodies go in chunks of this size
    processed: bool = True  # False once the processor closed cleanly: the rest goes through unmodified
    ended: bool = False  # an immediate response ended the request
    _first: bool = field(default=True)

    async def _exchange(self, request: Any, expect: str) -> Any | None:
        """Send one message and read its answer; None when the processor closed the stream cleanly."""
        if not self.processed or self.ended:
            return None
        if self._first:  # Envoy states its body modes on the first message of a stream
            request.protocol_config.CopyFrom(pb.ProtocolConfiguration(
                request_body_mode=BODY_MODE_NUMBERS[self.modes.request_body],
                response_body_mode=BODY_MODE_NUMBERS[self.modes.response_body]))
            self._first = False
        try:
            await asyncio.wait_for(self.call.write(request), self.timeout)
            reply = await asyncio.wait_for(self.call.read(), self.timeout)
        except TimeoutError:
            self.call.cancel()
            raise ProcessorFailure(504, "ext_proc per-message timeout exceeded") from None
        except (grpc.aio.AioRpcError, grpc.aio.UsageError) as e:
            raise ProcessorFailure(500, f"ext_proc gRPC error {_code(e)}") from None
        except asyncio.InvalidStateError:  # the stream had already ended: its status says how
            reply = grpc.aio.EOF
        if reply is grpc.aio.EOF:
            status = await self.call.code()
            if status != grpc.StatusCode.OK:
                raise ProcessorFailure(500, f"ext_proc gRPC error {status.name}")
            self.processed = False
            return None
        kind = reply.WhichOneof("response")
        if kind == "immediate_response":
            self.ended = True
            return reply
        if kind != expect:  # Envoy treats an answer to another message as a protocol error
            self.call.cancel()
            raise ProcessorFailure(500, f"ext_proc answered {kind} to {expect}")
        if expect in _HEADERS and reply.HasField("mode_override") and self.modes.allow_mode_override:
            # honoured in answer to headers only, and only with allow_mode_override (else ignored, as Envoy does)
            try:
                self.modes = overridden(self.modes, reply.mode_override)
            except ValueError as e:
                self.call.cancel()
                raise ProcessorFailure(500, f"ext_proc mode_override: {e}") from None
        return reply

    async def request(self, headers: Sequence[tuple[str, str]], body: bytes,
                      trailers: Sequence[tuple[str, str]] = ()) -> RequestOutcome:
        """Headers (with Envoy's pseudo-headers), then the body as the mode sends it, then trailers."""
        out = RequestOutcome(list(headers), body)
        has_body = bool(body) or bool(trailers)
        reply = await self._exchange(pb.ProcessingRequest(request_headers=pb.HttpHeaders(
            headers=hdr.to_map(headers), end_of_stream=not has_body)), "request_headers")
        if self._apply_request(out, reply, "request_headers") or not has_body or self.modes.request_body == "NONE":
            return out
        if self.modes.request_body == "STREAMED":
            step = self.chunk_bytes
            parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        else:
            parts = [body]
        new_body = bytearray()
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            reply = await self._exchange(pb.ProcessingRequest(request_body=pb.HttpBody(
                body=part, end_of_stream=last and not trailers)), "request_body")
            chunk = RequestOutcome(out.headers, part)
            if self._apply_request(chunk, reply, "request_body",
                                   headers_sent=self.modes.request_body == "STREAMED"):
                out.immediate = chunk.immediate
                return out
            out.headers, out.clear_route_cache = chunk.headers, out.clear_route_cache or chunk.clear_route_cache
            new_body.extend(chunk.body)
        out.body = bytes(new_body)
        if trailers and self.modes.request_trailers:
            reply = await self._exchange(pb.ProcessingRequest(request_trailers=pb.HttpTrailers(
                trailers=hdr.to_map(trailers))), "request_trailers")
            if reply is not None and reply.WhichOneof("response") == "immediate_response":
                out.immediate = _immediate(reply.immediate_response)
        return out

    def _apply_request(self, out: RequestOutcome, reply: Any | None, kind: str, headers_sent: bool = False) -> bool:
        """Apply one answer; True when it ended the request (an immediate response)."""
        if reply is None:
            return False
        if reply.WhichOneof("response") == "immediate_response":
            out.immediate = _immediate(reply.immediate_response)
            return True
        common = getattr(reply, kind).response
        if common.HasField("header_mutation") and not headers_sent:
            out.headers = hdr.apply_mutation(out.headers, common.header_mutation)
        if common.HasField("body_mutation"):
            out.body = b"" if common.body_mutation.clear_body else bytes(common.body_mutation.body)
        out.clear_route_cache = out.clear_route_cache or common.clear_route_cache
        return False

    async def response_headers(self, status: int, headers: Sequence[tuple[str, str]],
                               end_of_stream: bool = False) -> ResponseHead:
        head = ResponseHead(status, list(headers))
        if not self.modes.response_headers:
            return head
        reply = await self._exchange(pb.ProcessingRequest(response_headers=pb.HttpHeaders(
            headers=hdr.to_map([(":status", str(status)), *headers]), end_of_stream=end_of_stream)),
            "response_headers")
        if reply is None:
            return head
        if reply.WhichOneof("response") == "immediate_response":
            head.immediate = _immediate(reply.immediate_response)
            return head
        common = reply.response_headers.response
        if common.HasField("header_mutation"):
            head.headers = hdr.apply_mutation(head.headers, common.header_mutation)
        return head

    @property
    def buffers_response(self) -> bool:
        """True when the response body goes to the processor whole (BUFFERED, maybe by its `mode_override`):
        the head waits for `response_body`'s answer, which may replace the answer (`Immediate`)."""
        return self.modes.response_body == "BUFFERED"

    async def response_body(self, body: bytes) -> bytes | Immediate:
        """The whole response body as the BUFFERED mode sends it (one message); what to send, or the answer the
        processor put in its place (Envoy's local reply: the head had not gone)."""
        if len(body) > BUFFER_LIMIT:
            self.abort()
            raise ProcessorFailure(500, "response body over the buffer limit")
        reply = await self._exchange(pb.ProcessingRequest(response_body=pb.HttpBody(
            body=body, end_of_stream=True)), "response_body")
        if reply is None:
            return body
        if reply.WhichOneof("response") == "immediate_response":
            return _immediate(reply.immediate_response)
        common = reply.response_body.response
        if common.HasField("body_mutation"):
            return b"" if common.body_mutation.clear_body else bytes(common.body_mutation.body)
        return body

    async def response_chunk(self, chunk: bytes, end_of_stream: bool) -> bytes:
        """One response chunk as the STREAMED mode sends it; the bytes to pass on."""
        if self.modes.response_body != "STREAMED":
            return chunk
        reply = await self._exchange(pb.ProcessingRequest(response_body=pb.HttpBody(
            body=chunk, end_of_stream=end_of_stream)), "response_body")
        if reply is None:
            return chunk
        if reply.WhichOneof("response") == "immediate_response":  # too late for a status: the stream is cut
            raise ProcessorFailure(500, "ext_proc immediate response in the response body")
        common = reply.response_body.response
        if common.HasField("body_mutation"):
            return b"" if common.body_mutation.clear_body else bytes(common.body_mutation.body)
        return chunk

    async def response_trailers(self, trailers: Sequence[tuple[str, str]]) -> None:
        if self.modes.response_trailers:
            await self._exchange(pb.ProcessingRequest(response_trailers=pb.HttpTrailers(
                trailers=hdr.to_map(trailers))), "response_trailers")

    async def aclose(self) -> None:
        """The request is over: Envoy ends its side of the stream."""
        if self.processed and not self.ended:
            try:
                await self.call.done_writing()
                await asyncio.wait_for(self.call.read(), self.timeout)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, TimeoutError):
                pass
        self.call.cancel()

    def abort(self) -> None:
        """The client or the upstream went away: Envoy resets the stream."""
        self.call.cancel()


def _code(e: Exception) -> str:
    return e.code().name if isinstance(e, grpc.aio.AioRpcError) else "UNAVAILABLE"


def _immediate(msg: Any) -> Immediate:
    out = hdr.apply_mutation([], msg.headers)
    return Immediate(int(msg.status.code) or 200, out, bytes(msg.body), msg.details)


def open_filter(ch: grpc.aio.Channel, modes: FilterModes, timeout: float = 10.0) -> FilterStream:
    """Open one request's stream to the processor for the filter `modes`."""
    stub = pb_grpc.ExternalProcessorStub(ch)
    call = stub.Process(metadata=((STAGE_METADATA, modes.stage),))
    return FilterStream(call, modes, timeout)
