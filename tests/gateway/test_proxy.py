"""Upstream request shaping and streamed usage extraction (pure)."""

from __future__ import annotations

import json

from maasctl.gateway.proxy import JsonUsageScanner, SseUsageFilter, prepare_body
from maasctl.gateway.usage import usage_numbers

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
         "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1}}


def sse(*chunks: object) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def test_stream_without_usage_gets_include_usage_upstream() -> None:
    raw = json.dumps({"model": "m", "stream": True, "stream_options": {"x": 1}}).encode()
    body = prepare_body(raw, "application/json")
    assert body.streaming and body.injected_usage and body.model == "m"
    assert json.loads(body.content)["stream_options"] == {"x": 1, "include_usage": True}
    asked = json.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": True}}).encode()
    same = prepare_body(asked, "application/json")
    assert same.content == asked and same.streaming and not same.injected_usage
    plain = b'{"model": "m"}'
    assert prepare_body(plain, "application/json").content == plain
    assert prepare_body(b"not json", "application/json").content == b"not json"


def test_injected_usage_chunk_is_dropped_but_counted_even_split_across_reads() -> None:
    stream = sse({"choices": [{"delta": {"content": "hi"}}]}, {"choices": [], "usage": USAGE})
    filt = SseUsageFilter(drop_usage_chunk=True)
    out = b"".join(filt.feed(stream[i:i + 7]) for i in range(0, len(stream), 7)) + filt.close()
    assert b'"usage"' not in out and b"hi" in out and out.endswith(b"data: [DONE]\n\n")
    assert filt.usage == USAGE
    keep = SseUsageFilter(drop_usage_chunk=False)
    assert keep.feed(stream) == stream and keep.usage == USAGE


def test_json_usage_scanner_and_numbers() -> None:
    scanner = JsonUsageScanner(1000)
    payload = json.dumps({"choices": [], "usage": USAGE}).encode()
    scanner.feed(payload[:10])
    scanner.feed(payload[10:])
    assert usage_numbers(scanner.usage) == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10,
                                            "cached_tokens": 2, "reasoning_tokens": 1}
    small = JsonUsageScanner(5)
    small.feed(payload)
    assert small.usage is None
    assert usage_numbers("garbage") == {}
