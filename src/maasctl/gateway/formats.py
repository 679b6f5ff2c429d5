"""Provider API formats on the request path (issue 38): an OpenAI Chat client served by a `messages`
(Anthropic) provider.

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
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Final

from maasctl.contract.errors import error_body
from maasctl.dataplane.body import InvalidBody, PreparedBody
from maasctl.dataplane.decompress import Decompressor
from maasctl.dataplane.translate import (
    MalformedAnswer,
    MessagesStreamToChat,
    chat_request_to_messages,
    messages_error_to_chat,
    messages_response_to_chat,
)

__all__ = ["ANTHROPIC_VERSION", "FORMATS", "AnswerTranslator", "translate_request"]

ANTHROPIC_VERSION: Final = "2023-06-01"
"""The `anthropic-version` sent to a `messages` provider: the API version the translation is written against."""
FORMATS: Final = ("openai-chat", "messages")
CHAT_SUFFIX: Final = "/chat/completions"
_DROPPED_HEADERS: Final = frozenset({"content-length", "content-encoding", "transfer-encoding", "content-type"})


def translate_request(body: PreparedBody, client_path: str, ceiling: int) -> PreparedBody:
    """The prepared Chat request as a Messages request (`ceiling`: the completion bound the request reserves
    when it states none). Raises InvalidBody (a TranslationError names the parameter) for what cannot go."""
    if not client_path.endswith(CHAT_SUFFIX):
        raise InvalidBody("this model's provider speaks the Messages API: only chat completions are served")
    if body.content[:1] != b"{":
        raise InvalidBody("a chat completion request is a JSON object")
    translated = chat_request_to_messages(json.loads(body.content), max_tokens_ceiling=ceiling)
    content = json.dumps(translated, separators=(",", ":"), ensure_ascii=False).encode()
    return replace(body, content=content, max_tokens=int(translated["max_tokens"]))


class AnswerTranslator:
    """A `messages` provider's answer as a Chat answer: `feed` the provider's bytes, `close` at their end;
    `status`/`headers` are the client's (final after `close` unless `streaming`)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], *, limit: int, created: int) -> None:
        lowered = {k.lower(): v for k, v in headers}
        self._decoder = Decompressor(lowered.get("content-encoding", ""))
        self.streaming = 200 <= status < 300 and "text/event-stream" in lowered.get("content-type", "")
        self.status = status
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED_HEADERS]
        self.headers = [*kept, ("content-type", "text/event-stream" if self.streaming else "application/json")]
        self._stream = MessagesStreamToChat(created=created, include_usage=True) if self.streaming else None
        self._created = created
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._over = False

    def feed(self, chunk: bytes) -> bytes:
        """Translated bytes for the client (a whole answer: none until `close`)."""
        if not self._decoder.readable:
            return b""
        plain = self._decoder.feed(chunk)
        if self._stream is not None:
            return self._stream.feed(plain)
        self._size += len(plain)
        if self._size > self._limit:
            self._over, self._parts = True, []
        elif plain:
            self._parts.append(plain)
        return b""

    def close(self) -> bytes:
        """The provider's body ended: the rest of a stream (its truncation error if it ended early), or the
        whole translated answer."""
        if self._stream is not None:
            return self._stream.close() if self._decoder.readable else self._bad("cannot be decoded")
        if not self._decoder.readable:
            return self._bad("cannot be decoded")
        if self._over:
            return self._bad("is too large to translate")
        raw = b"".join(self._parts)
        if not 200 <= self.status < 300:
            self.status, body = messages_error_to_chat(self.status, raw)
            return body
        try:
            answer = messages_response_to_chat(json.loads(raw), created=self._created)
        except (ValueError, RecursionError, MalformedAnswer):  # JSONDecodeError is a ValueError
            return self._bad("is not a Messages answer")
        return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()

    def _bad(self, why: str) -> bytes:
        if self.streaming:  # the head has gone: the stream's own in-band error
            return b"data: " + error_body(502, f"the provider's answer {why}", "upstream_malformed") + b"\n\n"
        self.status = 502
        return error_body(502, f"the provider's answer {why}", "upstream_malformed")
