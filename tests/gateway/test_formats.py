"""A `messages` provider's answers as the OpenAI client gets them (gateway.formats): whole answers, errors and
their statuses, streams in any chunking, and what cannot be read. Usage the provider does not report is never
read as 0 tokens (the data plane then charges its estimate)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from maasctl.dataplane.body import InvalidBody, PreparedBody
from maasctl.dataplane.translate import TranslationError
from maasctl.gateway.formats import AnswerTranslator, translate_request

CREATED = 1_700_000_000
JSON = [("content-type", "application/json"), ("content-length", "999"), ("request-id", "req_1")]
SSE = [("content-type", "text/event-stream; charset=utf-8"), ("request-id", "req_2")]
USAGE = {"input_tokens": 7, "output_tokens": 5, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 0}


def _message(**extra: Any) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "hello there"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": USAGE, **extra}


def _whole(status: int, body: bytes, headers: list[tuple[str, str]] = JSON, limit: int = 1 << 20,
           chunk: int = 7) -> tuple[AnswerTranslator, bytes]:
    t = AnswerTranslator(status, headers, limit=limit, created=CREATED)
    out = b"".join(t.feed(body[i:i + chunk]) for i in range(0, len(body), chunk))
    assert out == b""  # nothing goes out before the whole answer is read
    return t, t.close()


def test_a_whole_answer_becomes_a_chat_completion_with_its_usage() -> None:
    t, out = _whole(200, json.dumps(_message()).encode())
    answer = json.loads(out)
    assert t.status == 200 and not t.streaming
    assert answer["object"] == "chat.completion" and answer["created"] == CREATED
    assert answer["choices"][0]["message"]["content"] == "hello there"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] == 10 and answer["usage"]["completion_tokens"] == 5
    assert answer["usage"]["prompt_tokens_details"] == {"cached_tokens": 3}
    assert dict(t.headers) == {"request-id": "req_1", "content-type": "application/json"}  # no stale length


@pytest.mark.parametrize("usage", [None, {}, {"input_tokens": 7}, {"output_tokens": 5},
                                   {"input_tokens": "7", "output_tokens": 5},
                                   {"input_tokens": True, "output_tokens": 5}])
def test_an_answer_without_both_counts_has_no_usage(usage: Any) -> None:
    body = {k: v for k, v in _message(usage=usage).items() if usage is not None or k != "usage"}
    _, out = _whole(200, json.dumps(body).encode())
    assert "usage" not in json.loads(out)


@pytest.mark.parametrize(("status", "error", "client_status", "code"), [
    (429, "rate_limit_error", 429, "rate_limit_error"),
    (529, "overloaded_error", 503, "overloaded_error"),
    (400, "invalid_request_error", 400, "invalid_request_error"),
    (401, "authentication_error", 502, "provider_auth_failed"),
    (403, "permission_error", 502, "provider_auth_failed"),
    (500, "api_error", 500, "api_error"),
])
def test_provider_errors_get_the_openai_envelope_and_status(status: int, error: str, client_status: int,
                                                            code: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": error, "message": "the provider said no"}}).encode()
    t, out = _whole(status, body)
    assert t.status == client_status
    assert json.loads(out)["error"]["code"] == code


@pytest.mark.parametrize(("body", "headers", "limit"), [
    pytest.param(b'{"object": "chat.completion", "choices": []}', JSON, 1 << 20, id="not-messages"),
    pytest.param(b"<html>bad gateway</html>", [("content-type", "text/html")], 1 << 20, id="html"),
    pytest.param(b"", JSON, 1 << 20, id="empty"),
    pytest.param(json.dumps(_message()).encode(), JSON, 64, id="too-large"),
    pytest.param(json.dumps(_message()).encode(), [*JSON, ("content-encoding", "br-unknown")], 1 << 20,
                 id="unknown-encoding"),
])
def test_what_cannot_be_read_is_a_502(body: bytes, headers: list[tuple[str, str]], limit: int) -> None:
    t, out = _whole(200, body, headers, limit)
    assert t.status == 502
    assert json.loads(out)["error"]["code"] == "upstream_malformed"


def test_a_compressed_answer_is_decoded_first() -> None:
    t, out = _whole(200, gzip.compress(json.dumps(_message()).encode()), [*JSON, ("content-encoding", "gzip")])
    assert t.status == 200 and json.loads(out)["choices"][0]["message"]["content"] == "hello there"
    assert "content-encoding" not in dict(t.headers)


def _events(with_usage: bool = True, stop: bool = True) -> bytes:
    start = {"type": "message_start", "message": {**_message(content=[], stop_reason=None),
                                                  "usage": {"input_tokens": 7, "output_tokens": 1}}}
    events = [start, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo"}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}},
              {"type": "content_block_stop", "index": 0}]
    delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    if with_usage:
        delta["usage"] = {"output_tokens": 5}
    events.append(delta)
    if stop:
        events.append({"type": "message_stop"})
    return b"".join(f"event: {e['type']}\r\ndata: {json.dumps(e)}\r\n\r\n".encode() for e in events)


def _chunks(out: bytes) -> list[Any]:
    return [json.loads(line[6:]) if line != b"data: [DONE]" else "[DONE]"
            for line in out.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("size", [1, 2, 5, 64, 1 << 16])
def test_a_stream_is_translated_as_it_comes_in_any_chunking(size: int) -> None:
    t = AnswerTranslator(200, SSE, limit=1 << 20, created=CREATED)
    assert t.streaming and dict(t.headers)["content-type"] == "text/event-stream"
    raw = _events()
    out = b"".join(t.feed(raw[i:i + size]) for i in range(0, len(raw), size)) + t.close()
    chunks = _chunks(out)
    assert chunks[-1] == "[DONE]"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1] if c["choices"])
    assert text == "héllo there"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] == 5
    assert chunks[-2]["usage"]["prompt_tokens"] == 7


def test_a_stream_without_final_counts_has_no_usage_chunk() -> None:
    """message_start's output count is a placeholder: without message_delta's count there is nothing to bill
    on, and no usage chunk (the data plane estimates) rather than one that says 1 token."""
    t = AnswerTranslator(200, SSE, limit=1 << 20, created=CREATED)
    chunks = _chunks(t.feed(_events(with_usage=False)) + t.close())
    assert chunks[-1] == "[DONE]" and all("usage" not in c for c in chunks[:-1])


def test_a_cut_stream_ends_with_an_error_event() -> None:
    t = AnswerTranslator(200, SSE, limit=1 << 20, created=CREATED)
    chunks = _chunks(t.feed(_events(stop=False)) + t.close())
    assert chunks[-1]["error"]["code"] == "upstream_stream_truncated"
    assert "[DONE]" not in chunks


def test_a_stream_in_an_unknown_encoding_ends_with_an_error_event() -> None:
    t = AnswerTranslator(200, [*SSE, ("content-encoding", "zstd-x")], limit=1 << 20, created=CREATED)
    assert t.feed(_events()) == b""
    assert _chunks(t.close())[-1]["error"]["code"] == "upstream_malformed"


def _prepared(body: dict[str, Any]) -> PreparedBody:
    return PreparedBody(json.dumps(body).encode(), model=str(body.get("model")), prompt_estimate=10)


def test_a_chat_request_goes_as_messages_with_the_bound_it_reserved() -> None:
    chat = {"model": "claude-x", "messages": [{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": "hi"}], "stream": True}
    sent = translate_request(_prepared(chat), "/v1/chat/completions", 4096)
    body = json.loads(sent.content)
    assert body == {"model": "claude-x", "max_tokens": 4096, "system": [{"type": "text", "text": "be brief"}],
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "stream": True}
    assert sent.max_tokens == 4096
    stated = translate_request(_prepared({**chat, "max_tokens": 100}), "/llm/m/v1/chat/completions", 4096)
    assert json.loads(stated.content)["max_tokens"] == 100 and stated.max_tokens == 100


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/embeddings", b'{"model": "m", "input": "x"}'),
    ("/v1/completions", b'{"model": "m", "prompt": "x"}'),
    ("/v1/chat/completions", b"model=m"),
])
def test_only_json_chat_completions_translate(path: str, body: bytes) -> None:
    with pytest.raises(InvalidBody):
        translate_request(PreparedBody(body), path, 4096)


@pytest.mark.parametrize(("extra", "param"), [({"n": 3}, "n"), ({"logprobs": True}, "logprobs"),
                                              ({"made_up": 1}, "made_up")])
def test_what_has_no_counterpart_is_refused_naming_it(extra: dict[str, Any], param: str) -> None:
    chat = {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(TranslationError) as caught:
        translate_request(_prepared(chat), "/v1/chat/completions", 4096)
    assert caught.value.param == param and caught.value.refusal().status == 400
