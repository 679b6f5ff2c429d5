"""Streamed answers from one format into the other, as incremental stateful translators: feed the provider's
bytes as they arrive (in any chunking: events split across reads are reassembled by `SseParser`), get the bytes
to send the client; `close()` at the provider's end of stream.

- `MessagesStreamToChat`: Anthropic's `message_start` / `content_block_*` / `message_delta` / `message_stop`
  events as `chat.completion.chunk`s, then (when the client asked: `stream_options.include_usage`) the usage
  chunk (`choices: []`) and `data: [DONE]`.
- `ChatStreamToMessages`: chunks as Anthropic's events, each with its `event:` name (Anthropic's SDK skips
  unnamed events); the final `message_delta` carries the whole usage, read from the usage chunk.
A provider's error event becomes the client format's in-stream error (which each SDK raises as `APIError`), and
a stream cut before its end becomes one too (`upstream_stream_truncated`): a truncated answer never looks whole.
Both keep `usage` (Chat dimensions: `dataplane.charge.usage_numbers` reads it) for metering.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from maasctl.contract.errors import error_body
from maasctl.dataplane.translate.common import (
    CHAT_FINISH_TO_STOP,
    STOP_TO_CHAT_FINISH,
    chat_usage_to_messages,
    dumps,
    messages_usage_to_chat,
    reports_usage,
)
from maasctl.dataplane.translate.errors import messages_error_type
from maasctl.dataplane.translate.sse import SseEvent, SseParser, encode_event

__all__ = ["ChatStreamToMessages", "MessagesStreamToChat"]

_TRUNCATED: Final = "the provider's stream ended before its end"
_STATUS_OF_TYPE: Final[Mapping[str, int]] = {
    "invalid_request_error": 400, "authentication_error": 502, "permission_error": 502, "billing_error": 402,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "timeout_error": 504,
    "overloaded_error": 503}


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else empty: a provider's odd event is read as saying nothing."""
    return value if isinstance(value, Mapping) else {}


def _text_or(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


def _json(event: SseEvent) -> Any:
    """An event's data as JSON; None when it is none (a provider's garbage event is skipped, not fatal)."""
    try:
        return json.loads(event.data)
    except (ValueError, RecursionError):
        return None


class MessagesStreamToChat:
    """Anthropic Messages events -> OpenAI chat chunks. `created` is the caller's clock (Unix seconds); `model`,
    when given, is the name the chunks carry (the published one of a renamed model) instead of the provider's."""

    def __init__(self, *, created: int, include_usage: bool = True, model: str | None = None) -> None:
        self._parser = SseParser()
        self._created = created
        self._include_usage = include_usage
        self._model_name = model
        self._id = ""
        self._model = ""
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, int | None] = {}  # Messages block index -> Chat tool index (None: text/other)
        self._tools = 0
        self._finished = False  # the finish chunk went out
        self._counted = False  # a message_delta gave the final counts (message_start's output is a placeholder)
        self.done = False

    @property
    def usage(self) -> dict[str, Any]:
        """The usage so far in Chat dimensions (the last `message_delta`'s counts are cumulative)."""
        return messages_usage_to_chat(self._usage)

    @property
    def counted(self) -> bool:
        """A `message_delta` gave the final counts: `usage` is what the provider billed."""
        return self._counted

    def feed(self, chunk: bytes) -> bytes:
        """The client bytes for a chunk of the provider's stream."""
        return b"".join(self._event(event) for event in self._parser.feed(chunk))

    def close(self) -> bytes:
        """At the provider's end of stream: the last event, or the truncation error if no `message_stop`."""
        out = b"".join(self._event(event) for event in self._parser.close())
        if not self.done:
            self.done = True
            out += encode_event(error_body(502, _TRUNCATED, "upstream_stream_truncated").decode())
        return out

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_event(dumps({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                                   "model": self._model, "choices": [{"index": 0, "delta": delta,
                                                                      "logprobs": None, "finish_reason": finish}]}))

    def _event(self, event: SseEvent) -> bytes:
        data = _json(event)
        if self.done or not isinstance(data, Mapping):
            return b""
        kind = data.get("type", event.event)
        if kind == "message_start":
            return self._start(data.get("message"))
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._block_delta(data)
        if kind == "message_delta":
            return self._message_delta(data)
        if kind == "message_stop":
            return self._stop()
        if kind == "error":
            return self._error(data.get("error"))
        return b""  # ping, content_block_stop and event types added later: nothing to say

    def _start(self, message: Any) -> bytes:
        message = message if isinstance(message, Mapping) else {}
        self._id, self._model = str(message.get("id", "")), self._model_name or str(message.get("model", ""))
        if isinstance(message.get("usage"), Mapping):
            self._usage = dict(message["usage"])
        return self._chunk({"role": "assistant", "content": ""})

    def _block_start(self, data: Mapping[str, Any]) -> bytes:
        block, index = data.get("content_block"), data.get("index")
        if not isinstance(block, Mapping) or not isinstance(index, int):
            return b""
        if block.get("type") == "tool_use":
            tool = self._blocks[index] = self._tools
            self._tools += 1
            arguments = dumps(block["input"]) if isinstance(block.get("input"), Mapping) and block["input"] else ""
            return self._chunk({"tool_calls": [{"index": tool, "id": str(block.get("id", "")), "type": "function",
                                                "function": {"name": str(block.get("name", "")),
                                                             "arguments": arguments}}]})
        self._blocks[index] = None
        text = block.get("text") if block.get("type") == "text" else None
        return self._chunk({"content": text}) if isinstance(text, str) and text else b""

    def _block_delta(self, data: Mapping[str, Any]) -> bytes:
        delta, index = data.get("delta"), data.get("index")
        if not isinstance(delta, Mapping):
            return b""
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            return self._chunk({"content": delta["text"]})
        tool = self._blocks.get(index) if isinstance(index, int) else None
        if delta.get("type") == "input_json_delta" and tool is not None and isinstance(delta.get("partial_json"),
                                                                                       str):
            return self._chunk({"tool_calls": [{"index": tool, "function": {"arguments": delta["partial_json"]}}]})
        return b""  # thinking, signature and citation deltas: Chat has no field for them

    def _message_delta(self, data: Mapping[str, Any]) -> bytes:
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})
            self._counted = reports_usage(self._usage)
        delta = data.get("delta")
        stop = delta.get("stop_reason") if isinstance(delta, Mapping) else None
        if not isinstance(stop, str) or self._finished:
            return b""
        self._finished = True
        return self._chunk({}, STOP_TO_CHAT_FINISH.get(stop, "stop"))

    def _stop(self) -> bytes:
        """`message_stop`: the finish chunk if no `message_delta` gave one (Chat clients wait for it), the usage
        chunk, `[DONE]`."""
        out = b"" if self._finished else self._chunk({}, "stop")
        self._finished = self.done = True
        if self._include_usage and self._counted:  # no final count: no usage chunk (the data plane estimates)
            out += encode_event(dumps({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                                       "model": self._model, "choices": [], "usage": self.usage}))
        return out + encode_event("[DONE]")

    def _error(self, error: Any) -> bytes:
        self.done = True
        error = _mapping(error)
        kind = _text_or(error.get("type"), "api_error")
        message = _text_or(error.get("message"), "the provider failed")
        return encode_event(error_body(_STATUS_OF_TYPE.get(kind, 500), message, kind).decode())


class ChatStreamToMessages:
    """OpenAI chat chunks -> Anthropic Messages events (the provider must have been asked for the usage
    chunk: `messages_request_to_chat` does)."""

    def __init__(self) -> None:
        self._parser = SseParser()
        self._started = False
        self._blocks = 0  # Messages blocks opened so far
        self._open: tuple[str, int] | None = None  # ("text" | tool index as str, Messages index)
        self._tools: dict[int, int] = {}  # Chat tool index -> Messages block index
        self._finish: str | None = None
        self._refused = False
        self._chat_usage: dict[str, Any] = {}
        self.done = False

    @property
    def usage(self) -> dict[str, Any]:
        """The provider's usage (Chat dimensions), for metering."""
        return dict(self._chat_usage)

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(self._event(event) for event in self._parser.feed(chunk))

    def close(self) -> bytes:
        """At the provider's end of stream: a stream that gave its finish reason ends as complete (some
        servers omit `[DONE]`), any other as the truncation error."""
        out = b"".join(self._event(event) for event in self._parser.close())
        if not self.done:
            out += self._end() if self._finish is not None else self._error_event(502, _TRUNCATED)
        return out

    @staticmethod
    def _emit(kind: str, data: dict[str, Any]) -> bytes:
        return encode_event(dumps({"type": kind, **data}), kind)

    def _event(self, event: SseEvent) -> bytes:
        if self.done:
            return b""
        if event.data.strip() == "[DONE]":
            return self._end()
        data = _json(event)
        if not isinstance(data, Mapping):
            return b""
        if data.get("error") is not None:
            message = _text_or(_mapping(data["error"]).get("message"), "the provider failed")
            return self._error_event(500, message)
        out = b"" if self._started else self._message_start(data)
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                out += self._choice(choice)
        if isinstance(data.get("usage"), Mapping):
            self._chat_usage = dict(data["usage"])
        return out

    def _message_start(self, chunk: Mapping[str, Any]) -> bytes:
        self._started = True
        return self._emit("message_start", {"message": {
            "id": str(chunk.get("id", "")), "type": "message", "role": "assistant", "model": str(
                chunk.get("model", "")), "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}})

    def _choice(self, choice: Mapping[str, Any]) -> bytes:
        delta = _mapping(choice.get("delta"))
        out = b""
        for key in ("content", "refusal"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                self._refused = self._refused or key == "refusal"
                out += self._text(text)
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, Mapping):
                out += self._tool(call)
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]
        return out

    def _open_block(self, key: str, block: dict[str, Any]) -> bytes:
        out = self._close_block()
        index, self._blocks = self._blocks, self._blocks + 1
        self._open = (key, index)
        return out + self._emit("content_block_start", {"index": index, "content_block": block})

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        index, self._open = self._open[1], None
        return self._emit("content_block_stop", {"index": index})

    def _text(self, text: str) -> bytes:
        out = b"" if self._open is not None and self._open[0] == "text" else self._open_block(
            "text", {"type": "text", "text": ""})
        assert self._open is not None
        return out + self._emit("content_block_delta", {"index": self._open[1],
                                                        "delta": {"type": "text_delta", "text": text}})

    def _tool(self, call: Mapping[str, Any]) -> bytes:
        """A tool call's first fragment opens its block; later fragments (by Chat `index`) add to it, even
        after another block opened (parallel calls interleaved: rare, and SDKs accumulate by index)."""
        tool = call.get("index", 0) if isinstance(call.get("index", 0), int) else 0
        function = _mapping(call.get("function"))
        out = b""
        if tool not in self._tools:
            out = self._open_block(f"tool{tool}", {"type": "tool_use", "id": str(call.get("id") or f"call_{tool}"),
                                                   "name": str(function.get("name") or ""), "input": {}})
            self._tools[tool] = self._blocks - 1
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out += self._emit("content_block_delta", {"index": self._tools[tool], "delta": {
                "type": "input_json_delta", "partial_json": arguments}})
        return out

    def _end(self) -> bytes:
        self.done = True
        out = b"" if self._started else self._message_start({})
        out += self._close_block()
        stop = "refusal" if self._refused else CHAT_FINISH_TO_STOP.get(self._finish or "stop", "end_turn")
        out += self._emit("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                            "usage": chat_usage_to_messages(self._chat_usage)})
        return out + self._emit("message_stop", {})

    def _error_event(self, status: int, message: str) -> bytes:
        self.done = True
        return self._emit("error", {"error": {"type": messages_error_type(status), "message": message}})
