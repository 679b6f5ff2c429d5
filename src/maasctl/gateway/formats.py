"""API formats on the request path (issue 38): an OpenAI Chat client served by a `messages` (Anthropic)
provider, and an Anthropic client at the Messages door (`/v1/messages`) served by any ExternalModel.

The body stage translates the request (`translate_request`); `AnswerTranslator` turns the provider's answer
into Chat before the other response stages (usage scan, usage chunk drop, model rename, output guardrails) read
it, so they, metering and rating only ever see OpenAI-shaped answers. Both pipeline fronts (the local gateway
and the payload processor) get this from the pipeline; the route says which format its provider speaks
(`RouteRule.api_format`, from `contract.labels.API_FORMAT_ANNOTATION`).

A streamed 2xx answer is translated event by event. Anything else (a JSON answer, an error) is read whole,
at most `limit` bytes, and answered at the end: its status may change (Anthropic's 529 is 503 for OpenAI
clients, a provider's 401/403 is 502), so a front holds the head until then (`ResponsePass.held`, and the
processor buffers the body: `ResponsePass.whole`). What cannot be read or is not Messages is a 502; a provider
that reports no usage gets no usage in the translation, so the data plane charges its estimate, never 0.

The Messages door is the same in the other direction, around everything else: the client's Messages request
becomes Chat first (`door_request`, before `prepare_body`), so every stage, metering included, reads Chat;
`DoorTranslator` turns the Chat answer the stages let out (after output guardrails) into Messages last. A door
request to a `messages` provider goes through both: Messages -> Chat -> Messages and back, so what Chat has no
field for (thinking, `cache_control`) is dropped there too (docs/providers.md). The data plane's own refusals
reach a door client in Anthropic's error shape (`door_refusal`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Final

from maasctl.contract.errors import Refusal, error_body
from maasctl.dataplane.body import InvalidBody, PreparedBody
from maasctl.dataplane.decompress import Decompressor
from maasctl.dataplane.translate import (
    ChatStreamToMessages,
    MalformedAnswer,
    MessagesStreamToChat,
    chat_error_to_messages,
    chat_request_to_messages,
    chat_response_to_messages,
    messages_error_body,
    messages_error_to_chat,
    messages_request_to_chat,
    messages_response_to_chat,
)
from maasctl.dataplane.translate.common import dumps

__all__ = ["AnswerTranslator", "DoorTranslator", "door_refusal", "door_request",
           "is_door", "translate_request"]

CHAT_SUFFIX: Final = "/chat/completions"
DOOR_SUFFIX: Final = "/v1/messages"
_DROPPED_HEADERS: Final = frozenset({"content-length", "content-encoding", "transfer-encoding", "content-type"})


def translate_request(body: PreparedBody, client_path: str, ceiling: int) -> PreparedBody:
    """The prepared Chat request as a Messages request (`ceiling`: the completion bound the request reserves
    when it states none). Raises InvalidBody (a TranslationError names the parameter) for what cannot go."""
    if not (client_path.endswith(CHAT_SUFFIX) or is_door(client_path)):  # the door's request is Chat by now
        raise InvalidBody("this model's provider speaks the Messages API: only chat completions are served")
    if body.content[:1] != b"{":
        raise InvalidBody("a chat completion request is a JSON object")
    translated = chat_request_to_messages(json.loads(body.content), max_tokens_ceiling=ceiling)
    content = dumps(translated).encode()
    return replace(body, content=content, max_tokens=int(translated["max_tokens"]))


class _WholeAnswer:
    """An answer read whole before it is translated, at most `limit` bytes (`over`: more came, nothing kept)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self.over = False

    def add(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._limit:
            self.over, self._parts = True, []
        elif chunk:
            self._parts.append(chunk)

    def bytes(self) -> bytes:
        return b"".join(self._parts)


def _headers_for(headers: list[tuple[str, str]], streaming: bool) -> list[tuple[str, str]]:
    """A translated answer's head: the body is ours, its length, encoding and type too."""
    kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED_HEADERS]
    return [*kept, ("content-type", "text/event-stream" if streaming else "application/json")]


class AnswerTranslator:
    """A `messages` provider's answer as a Chat answer: `feed` the provider's bytes, `close` at their end;
    `status`/`headers` are the client's (final after `close` unless `streaming`)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], *, limit: int, created: int,
                 model: str | None = None, include_usage: bool = True) -> None:
        lowered = {k.lower(): v for k, v in headers}
        self._decoder = Decompressor(lowered.get("content-encoding", ""))
        self.streaming = 200 <= status < 300 and "text/event-stream" in lowered.get("content-type", "")
        self.status = status
        self.headers = _headers_for(headers, self.streaming)
        # a stream's translator also does what the usage filter does for other streams (gateway.pipeline): it
        # knows the usage, writes the published model name and leaves out the usage chunk the client did not ask
        self._stream = MessagesStreamToChat(created=created, include_usage=include_usage, model=model) \
            if self.streaming else None
        self._created = created
        self._whole = _WholeAnswer(limit)

    @property
    def stream_usage(self) -> dict[str, Any] | None:
        """A stream's usage in Chat dimensions, once the provider gave its final counts (else None)."""
        return self._stream.usage if self._stream is not None and self._stream.counted else None

    @property
    def stream_ended(self) -> bool:
        """The provider's stream reached its end (`message_stop`, or an error event)."""
        return self._stream is not None and self._stream.done

    def feed(self, chunk: bytes) -> bytes:
        """Translated bytes for the client (a whole answer: none until `close`)."""
        if not self._decoder.readable:
            return b""
        plain = self._decoder.feed(chunk)
        if self._stream is not None:
            return self._stream.feed(plain)
        self._whole.add(plain)
        return b""

    def close(self) -> bytes:
        """The provider's body ended: the rest of a stream (its truncation error if it ended early), or the
        whole translated answer."""
        if self._stream is not None:
            return self._stream.close() if self._decoder.readable else self._bad("cannot be decoded")
        if not self._decoder.readable:
            return self._bad("cannot be decoded")
        if self._whole.over:
            return self._bad("is too large to translate")
        raw = self._whole.bytes()
        if not 200 <= self.status < 300:
            self.status, body = messages_error_to_chat(self.status, raw)
            return body
        try:
            answer = messages_response_to_chat(json.loads(raw), created=self._created)
        except (ValueError, RecursionError, MalformedAnswer):  # JSONDecodeError is a ValueError
            return self._bad("is not a Messages answer")
        return dumps(answer).encode()

    def _bad(self, why: str) -> bytes:
        if self.streaming:  # the head has gone: the stream's own in-band error
            return b"data: " + error_body(502, f"the provider's answer {why}", "upstream_malformed") + b"\n\n"
        self.status = 502
        return error_body(502, f"the provider's answer {why}", "upstream_malformed")


# --- the Messages door -----------------------------------------------------------------------------------


def is_door(path: str | None) -> bool:
    """A request at the Messages door (`/v1/messages` on the base URL or under a model's path)."""
    return path is not None and path.endswith(DOOR_SUFFIX)


def door_request(raw: bytes) -> bytes:
    """A door client's Messages request as the Chat request every stage reads. Raises InvalidBody (a
    TranslationError names the parameter in Anthropic's spelling)."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidBody("a Messages request is a JSON object") from None
    if not isinstance(parsed, dict):
        raise InvalidBody("a Messages request is a JSON object")
    return dumps(messages_request_to_chat(parsed)).encode()


def door_refusal(refusal: Refusal) -> Refusal:
    """The data plane's own refusal in Anthropic's error shape (its 401/403 are the caller's: kept)."""
    status, body = chat_error_to_messages(refusal.status, refusal.body, from_provider=False)
    return Refusal(status, refusal.code, refusal.message, refusal.headers, refusal.param, raw_body=body)


class DoorTranslator:
    """The Chat answer the stages let out, as Messages for a door client: a 2xx stream event by event,
    anything else whole (at most `limit` bytes) with its status mapped (a provider's 401/403 is 502; the data
    plane's own refusals keep theirs: `close(from_provider=False)`)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], *, limit: int) -> None:
        lowered = {k.lower(): v for k, v in headers}
        self.streaming = 200 <= status < 300 and "text/event-stream" in lowered.get("content-type", "")
        self._stream = ChatStreamToMessages() if self.streaming else None
        self._whole = _WholeAnswer(limit)

    @staticmethod
    def edit_headers(headers: list[tuple[str, str]], streaming: bool) -> list[tuple[str, str]]:
        """The head a door client gets."""
        return _headers_for(headers, streaming)

    def feed(self, chunk: bytes) -> bytes:
        if self._stream is not None:
            return self._stream.feed(chunk)
        self._whole.add(chunk)
        return b""

    def close(self, status: int, *, from_provider: bool = True) -> tuple[int, bytes]:
        """(status, the rest of the answer) once the Chat answer ended; `status` is the Chat answer's."""
        if self._stream is not None:
            return status, self._stream.close()
        if self._whole.over:
            return 502, messages_error_body(502, "the answer is too large to translate")
        raw = self._whole.bytes()
        if not 200 <= status < 300:
            return chat_error_to_messages(status, raw, from_provider=from_provider)
        try:
            answer = chat_response_to_messages(json.loads(raw))
        except (ValueError, RecursionError, MalformedAnswer):
            return 502, messages_error_body(502, "the answer is not a chat completion")
        return status, dumps(answer).encode()
