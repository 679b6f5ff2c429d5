"""Benchmark the pure Chat <-> Messages translation (issue 38): what it adds to a request.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/translate_bench.py``. No control plane needed.

Method: a realistic chat request (system prompt, 6 turns, 2 tools, a tool call and its result, ~4 KB) and its
answer (text + tool call); each call timed over 5,000 iterations after a warm-up, median of 5 runs, in
microseconds per call. Streams: a 200-event answer fed one provider event per `feed` (the gateway's usual
chunking), microseconds per event. JSON parsing and serialising of the bodies are included where the data plane
would do them for the translation (the request is already parsed by `prepare_body`).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from maasctl.dataplane.translate import (
    ChatStreamToMessages,
    MessagesStreamToChat,
    chat_request_to_messages,
    chat_response_to_messages,
    messages_request_to_chat,
    messages_response_to_chat,
)

TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Look something up " * 5,
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "string"}, "n": {"type": "integer"}}}}}
         for i in range(2)]
CHAT_REQUEST: dict[str, Any] = {
    "model": "claude-x", "max_tokens": 512, "temperature": 0.3, "stream": False, "tools": TOOLS,
    "messages": [{"role": "system", "content": "You are a careful assistant. " * 20},
                 *[{"role": r, "content": "Some conversation text here. " * 15}
                   for r in ("user", "assistant", "user", "assistant", "user")],
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "call_1", "type": "function", "function": {"name": "tool_0",
                                                                       "arguments": '{"q":"x","n":3}'}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "result " * 40}]}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "stop_reason": "tool_use",
           "stop_sequence": None, "usage": {"input_tokens": 900, "output_tokens": 120,
                                            "cache_read_input_tokens": 512},
           "content": [{"type": "text", "text": "An answer of some length. " * 30},
                       {"type": "tool_use", "id": "toolu_1", "name": "tool_1", "input": {"q": "y", "n": 1}}]}


def per_call(fn: Callable[[], object], n: int = 5000) -> float:
    fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def anthropic_stream(events: int) -> list[bytes]:
    out = [b'event: message_start\ndata: ' + json.dumps({"type": "message_start", "message": {
        **MESSAGE, "content": [], "stop_reason": None}}).encode() + b"\n\n",
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n']
    out += [b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"word "}}\n\n'] * (events - 4)
    out += [b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
            b'"usage":{"output_tokens":196}}\n\n', b'event: message_stop\ndata: {"type":"message_stop"}\n\n']
    return out


def chat_stream(events: int) -> list[bytes]:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "g",
             "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]}
    out = [b"data: " + json.dumps(chunk).encode() + b"\n\n"] * (events - 2)
    out += [b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"g","choices":[],'
            b'"usage":{"prompt_tokens":9,"completion_tokens":198,"total_tokens":207}}\n\n', b"data: [DONE]\n\n"]
    return out


def per_event(make: Callable[[], MessagesStreamToChat | ChatStreamToMessages], events: list[bytes]) -> float:
    def run() -> None:
        translator = make()
        for event in events:
            translator.feed(event)
        translator.close()
    return per_call(run, 200) / len(events)


def main() -> None:
    anthropic_request = chat_request_to_messages(CHAT_REQUEST, max_tokens_ceiling=4096)
    completion = messages_response_to_chat(MESSAGE, created=1)
    raw_message, raw_completion = json.dumps(MESSAGE).encode(), json.dumps(completion).encode()
    print(f"python {platform.python_version()}, request {len(json.dumps(CHAT_REQUEST))} bytes")
    print(f"chat -> messages request   {per_call(lambda: json.dumps(chat_request_to_messages(CHAT_REQUEST, max_tokens_ceiling=4096))):7.1f} us")  # noqa: E501
    print(f"messages -> chat request   {per_call(lambda: json.dumps(messages_request_to_chat(anthropic_request))):7.1f} us")  # noqa: E501
    print(f"messages -> chat answer    {per_call(lambda: json.dumps(messages_response_to_chat(json.loads(raw_message), created=1))):7.1f} us")  # noqa: E501
    print(f"chat -> messages answer    {per_call(lambda: json.dumps(chat_response_to_messages(json.loads(raw_completion)))):7.1f} us")  # noqa: E501
    print(f"messages -> chat stream    {per_event(lambda: MessagesStreamToChat(created=1), anthropic_stream(200)):7.1f} us/event")  # noqa: E501
    print(f"chat -> messages stream    {per_event(ChatStreamToMessages, chat_stream(200)):7.1f} us/event")


if __name__ == "__main__":
    main()
