"""API formats on the request path (gateway.formats). A `messages` provider's answers as the OpenAI client gets
them: whole answers, errors and their statuses, streams in any chunking, and what cannot be read; usage the
provider does not report is never read as 0 tokens (the data plane then charges its estimate). The Messages
door: its requests read as Chat, Chat answers and the data plane's refusals leaving it in Anthropic's shape."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from maasctl.contract.errors import Refusal
from maasctl.dataplane.body import InvalidBody, PreparedBody
from maasctl.dataplane.translate import TranslationError
from maasctl.gateway.formats import (
    AnswerTranslator,
    DoorTranslator,
    door_refusal,
    door_request,
    is_door,
    translate_request,
)

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


# -- the Messages door -----------------------------------------------------------------------------------------

CHAT = {"id": "c1", "object": "chat.completion", "created": CREATED, "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi back"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.mark.parametrize(("path", "door"), [("/v1/messages", True), ("/llm/m/v1/messages", True),
                                            ("/v1/chat/completions", False), ("/v1/messages/count_tokens", False),
                                            ("/v1/messagesx", False), (None, False)])
def test_the_door_is_the_messages_path(path: str | None, door: bool) -> None:
    assert is_door(path) is door


def test_a_door_request_is_read_as_chat() -> None:
    chat = json.loads(door_request(json.dumps({"model": "m", "max_tokens": 20, "system": "brief",
                                               "messages": [{"role": "user", "content": "hi"}]}).encode()))
    assert chat["messages"][0] == {"role": "system", "content": "brief"}
    assert chat["max_completion_tokens"] == 20


@pytest.mark.parametrize("raw", [b"", b"[1]", b"not json", b'"text"', b'{"model": "m", "container": "c"}'])
def test_a_door_request_that_cannot_be_read_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidBody):
        door_request(raw)


@pytest.mark.parametrize(("status", "expected", "kind"), [(401, 401, "authentication_error"),
                                                          (403, 403, "permission_error"),
                                                          (429, 429, "rate_limit_error"),
                                                          (413, 413, "request_too_large"),
                                                          (503, 503, "overloaded_error")])
def test_the_data_planes_refusals_reach_a_door_client_in_anthropics_shape(status: int, expected: int,
                                                                          kind: str) -> None:
    """Its own 401/403 are the caller's (kept, never the provider's 502); headers such as retry-after stay."""
    shaped = door_refusal(Refusal(status, "some_code", "no", {"retry-after": "5"}))
    assert shaped.status == expected and shaped.headers == {"retry-after": "5"}
    assert json.loads(shaped.body) == {"type": "error", "error": {"type": kind, "message": "no"}}


def _door_whole(status: int, body: bytes, *, from_provider: bool = True, limit: int = 1 << 20) -> tuple[int, Any]:
    t = DoorTranslator(status, JSON, limit=limit)
    assert not t.streaming and t.feed(body) == b""
    out_status, out = t.close(status, from_provider=from_provider)
    return out_status, json.loads(out)


def test_a_whole_chat_answer_leaves_the_door_as_a_message() -> None:
    status, message = _door_whole(200, json.dumps(CHAT).encode())
    assert status == 200 and message["type"] == "message" and message["stop_reason"] == "end_turn"
    assert message["content"] == [{"type": "text", "text": "hi back"}]
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (10, 5)
    assert dict(DoorTranslator.edit_headers(JSON, False)) == {"request-id": "req_1",
                                                              "content-type": "application/json"}


@pytest.mark.parametrize(("status", "from_provider", "expected"), [(401, True, 502), (403, True, 502),
                                                                   (400, False, 400), (401, False, 401),
                                                                   (429, True, 429), (500, True, 500)])
def test_errors_leave_the_door_in_anthropics_shape(status: int, from_provider: bool, expected: int) -> None:
    body = json.dumps({"error": {"message": "nope", "type": "x", "code": "y"}}).encode()
    out_status, error = _door_whole(status, body, from_provider=from_provider)
    assert out_status == expected and error["type"] == "error"


@pytest.mark.parametrize(("body", "limit"), [(b"<html>", 1 << 20), (b'{"object": "list"}', 1 << 20),
                                             (json.dumps(CHAT).encode(), 32)])
def test_what_is_no_chat_answer_leaves_the_door_as_a_502(body: bytes, limit: int) -> None:
    status, error = _door_whole(200, body, limit=limit)
    assert status == 502 and error["type"] == "error"


def test_a_chat_stream_leaves_the_door_as_messages_events() -> None:
    chunks = [{"id": "c1", "object": "chat.completion.chunk", "created": CREATED, "model": "gpt-x",
               "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
              for word in ("hi", " there")]
    chunks.append({**chunks[0], "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**chunks[0], "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    raw = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    t = DoorTranslator(200, [("content-type", "text/event-stream")], limit=1 << 20)
    assert t.streaming
    out = b"".join(t.feed(raw[i:i + 3]) for i in range(0, len(raw), 3)) + t.close(200)[1]
    kinds = [line[7:] for line in out.decode().split("\n") if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    [delta] = [json.loads(line[6:]) for line in out.decode().split("\n")
               if line.startswith("data: ") and '"message_delta"' in line]
    assert delta["usage"]["output_tokens"] == 5 and delta["delta"]["stop_reason"] == "end_turn"


def test_a_translated_stream_names_the_published_model_and_keeps_its_usage_for_metering() -> None:
    """The stream's translator does the usage filter's work: the published name in every chunk, no usage
    chunk when the client did not ask for one, the usage still there for metering once the final count came."""
    t = AnswerTranslator(200, SSE, limit=1 << 20, created=CREATED, model="published", include_usage=False)
    raw = _events()
    assert t.stream_usage is None and not t.stream_ended
    chunks = _chunks(t.feed(raw))
    assert t.stream_ended and t.stream_usage is not None and t.stream_usage["completion_tokens"] == 5
    chunks += _chunks(t.close())
    assert chunks[-1] == "[DONE]" and {c["model"] for c in chunks[:-1]} == {"published"}
    assert all("usage" not in c for c in chunks[:-1])
    cut = AnswerTranslator(200, SSE, limit=1 << 20, created=CREATED, include_usage=False)
    cut.feed(_events(with_usage=False))
    assert cut.stream_ended and cut.stream_usage is None  # ended, but nothing to bill on: the estimate
