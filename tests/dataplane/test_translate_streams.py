"""Streamed answers: the provider's events, cut into arbitrary pieces, translated incrementally and read by the
official SDK clients' own stream parsers and accumulators."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk
from pydantic import TypeAdapter

from maasctl.dataplane.charge import usage_numbers
from maasctl.dataplane.translate import ChatStreamToMessages, MessagesStreamToChat, SseEvent, SseParser

from .translate_sdk import anthropic_client, openai_client, parse_sse, split, sse_stream

NOW = 1_790_000_000
_EVENT = TypeAdapter(RawMessageStreamEvent)


def anthropic_events(*, tool: bool = True, end: bool = True) -> list[tuple[str | None, Any]]:
    """A Messages stream as Anthropic sends it (a text block, optionally a tool call), each event an SDK type."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 4}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Héllo"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " wörld"}},
        {"type": "content_block_stop", "index": 0}]
    if tool:
        events += [
            {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                                  "partial_json": '{"city": '}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                                  "partial_json": '"Oslo"}'}},
            {"type": "content_block_stop", "index": 1}]
    events.append({"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn",
                                                      "stop_sequence": None}, "usage": {"output_tokens": 25}})
    if end:
        events.append({"type": "message_stop"})
    for event in events:
        if event["type"] != "ping":
            _EVENT.validate_python(event)  # the provider side is what Anthropic's SDK accepts
    return [(e["type"], e) for e in events]


def chat_chunks(*, tools: bool = True, done: bool = True, usage: bool = True) -> bytes:
    """An OpenAI-format stream (vLLM-style: usage chunk, then [DONE]), each chunk an SDK type."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return ChatCompletionChunk.model_validate({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": NOW, "model": "gpt-x",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).model_dump(
            mode="json", exclude_none=True)
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Bon"}), chunk({"content": "jour"})]
    if tools:
        chunks += [
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                   "function": {"name": "w", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                   "function": {"name": "t", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})]  # interleaved
    chunks.append(chunk({}, "tool_calls" if tools else "stop"))
    events: list[tuple[str | None, Any]] = [(None, c) for c in chunks]
    if usage:
        events.append((None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": NOW,
                              "model": "gpt-x", "choices": [], "usage": {
                                  "prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39,
                                  "prompt_tokens_details": {"cached_tokens": 10}}}))
    if done:
        events.append((None, "[DONE]"))
    return sse_stream(events)


def translate(translator: MessagesStreamToChat | ChatStreamToMessages, pieces: list[bytes]) -> bytes:
    return b"".join(translator.feed(p) for p in pieces) + translator.close()


def streaming(body: bytes) -> Any:
    def handle(_: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
    return handle


# --- Anthropic events -> OpenAI chunks ----------------------------------------------------------------------


def test_chunks_are_valid_and_end_with_the_usage_chunk_and_done() -> None:
    out = translate(MessagesStreamToChat(created=NOW), [sse_stream(anthropic_events())])
    events = parse_sse(out)
    assert events[-1] == (None, "[DONE]")
    chunks = [ChatCompletionChunk.model_validate_json(data) for _, data in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"]
    final = chunks[-1]
    assert final.choices == [] and final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (15, 25)
    assert final.usage.prompt_tokens_details is not None and final.usage.prompt_tokens_details.cached_tokens == 4


def test_without_include_usage_no_usage_chunk_but_usage_is_kept_for_metering() -> None:
    translator = MessagesStreamToChat(created=NOW, include_usage=False)
    events = parse_sse(translate(translator, [sse_stream(anthropic_events(tool=False))]))
    assert all(ChatCompletionChunk.model_validate_json(d).choices for _, d in events[:-1])
    assert usage_numbers(translator.usage)["total_tokens"] == 40


def test_openai_client_accumulates_text_tool_call_and_usage() -> None:
    body = translate(MessagesStreamToChat(created=NOW), split(sse_stream(anthropic_events()), iter([7] * 10_000)))
    stream = openai_client(streaming(body), []).chat.completions.create(
        model="claude-x", messages=[{"role": "user", "content": "x"}], stream=True,
        stream_options={"include_usage": True})
    text, arguments, usage, names = "", "", None, []
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                names += [call.function.name] if call.function and call.function.name else []
                arguments += call.function.arguments or "" if call.function else ""
    assert text == "Héllo wörld" and names == ["weather"] and json.loads(arguments) == {"city": "Oslo"}
    assert usage is not None and usage.total_tokens == 40


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=40), max_size=200), crlf=st.booleans())
def test_any_chunking_gives_the_same_translation(sizes: list[int], crlf: bool) -> None:
    raw = sse_stream(anthropic_events())
    whole = translate(MessagesStreamToChat(created=NOW), [raw])
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    assert translate(MessagesStreamToChat(created=NOW), split(raw, iter(sizes))) == whole


def test_a_cut_stream_raises_in_the_openai_client() -> None:
    body = translate(MessagesStreamToChat(created=NOW), [sse_stream(anthropic_events(end=False))[:-5]])
    stream = openai_client(streaming(body), []).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(openai.APIError, match="ended before its end"):
        for _ in stream:
            pass


def test_a_provider_error_event_raises_in_the_openai_client_and_ends_the_stream() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = [*anthropic_events()[:4], ("error", overloaded)]
    translator = MessagesStreamToChat(created=NOW)
    body = translate(translator, [sse_stream(events), sse_stream(anthropic_events()[4:])])
    assert json.loads(parse_sse(body)[-1][1])["error"]["code"] == "overloaded_error"
    stream = openai_client(streaming(body), []).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(openai.APIError, match="Overloaded"):
        for _ in stream:
            pass


def test_unknown_events_comments_and_garbage_are_ignored() -> None:
    events = anthropic_events(tool=False)
    noisy = sse_stream([*events[:2], ("future_event", {"type": "future_event"}), ("x", "{not json"), *events[2:]])
    plain = translate(MessagesStreamToChat(created=NOW), [sse_stream(events)])
    assert translate(MessagesStreamToChat(created=NOW), [b": keep-alive\n\n", noisy]) == plain


# --- OpenAI chunks -> Anthropic events ----------------------------------------------------------------------


def test_events_are_named_valid_sdk_events() -> None:
    out = parse_sse(translate(ChatStreamToMessages(), [chat_chunks()]))
    for name, data in out:
        event = _EVENT.validate_json(data)
        assert name == event.type
    assert [n for n, _ in out][:2] == ["message_start", "content_block_start"]
    assert [n for n, _ in out][-2:] == ["message_delta", "message_stop"]


def test_anthropic_client_accumulates_the_final_message() -> None:
    body = translate(ChatStreamToMessages(), split(chat_chunks(), iter([5] * 10_000)))
    with anthropic_client(streaming(body), []).messages.stream(
            model="gpt-x", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    text, first, second = message.content
    assert text.type == "text" and text.text == "Bonjour"
    assert first.type == "tool_use" and (first.id, first.name, first.input) == ("call_a", "w", {"city": "Oslo"})
    assert second.type == "tool_use" and second.input == {}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (
        20, 10, 9)


def test_a_stream_that_gave_its_finish_without_done_still_ends_whole() -> None:
    out = parse_sse(translate(ChatStreamToMessages(), [chat_chunks(tools=False, done=False)]))
    assert [n for n, _ in out][-1] == "message_stop"


@pytest.mark.parametrize("body", [chat_chunks(tools=False, done=False, usage=False)[:-40], b""])
def test_a_cut_stream_raises_in_the_anthropic_client(body: bytes) -> None:
    translated = translate(ChatStreamToMessages(), [body])
    with pytest.raises(anthropic.APIStatusError, match="ended before its end"), anthropic_client(
            streaming(translated), []).messages.stream(
            model="g", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as stream:
        stream.get_final_message()


def test_an_in_stream_openai_error_raises_in_the_anthropic_client() -> None:
    raw = chat_chunks(tools=False).split(b"\n\n")
    translated = translate(ChatStreamToMessages(), [b"\n\n".join(raw[:2]) + b"\n\n", sse_stream(
        [(None, {"error": {"message": "boom", "type": "server_error"}})])])
    assert parse_sse(translated)[-1][0] == "error"
    with pytest.raises(anthropic.APIStatusError, match="boom"), anthropic_client(
            streaming(translated), []).messages.stream(
            model="g", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as stream:
        stream.get_final_message()


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=30), max_size=300))
def test_any_chunking_of_a_chat_stream_gives_the_same_events(sizes: list[int]) -> None:
    raw = chat_chunks()
    assert translate(ChatStreamToMessages(), split(raw, iter(sizes))) == translate(ChatStreamToMessages(), [raw])


# --- the SSE reader -----------------------------------------------------------------------------------------


def test_sse_parser_reads_multiline_data_crlf_and_a_last_event_without_blank_line() -> None:
    parser = SseParser()
    events = parser.feed(b"event: a\r\ndata: 1\r\ndata: 2\r")
    events += parser.feed(b"\n\r\nid: 7\nretry: 5\ndata: x\n")
    assert events == [SseEvent("a", "1\n2")]
    assert parser.close() == [SseEvent(None, "x")]


def test_sse_parser_refuses_an_unbounded_event() -> None:
    parser = SseParser()
    with pytest.raises(ValueError, match="too large"):
        parser.feed(b"data: " + b"x" * (4 * 1024 * 1024 + 1))


def test_a_stream_without_message_delta_still_gives_a_finish_reason() -> None:
    events = [e for e in anthropic_events(tool=False) if e[0] != "message_delta"]
    chunks = [ChatCompletionChunk.model_validate_json(d) for _, d in parse_sse(
        translate(MessagesStreamToChat(created=NOW, include_usage=False), [sse_stream(events)]))[:-1]]
    assert chunks[-1].choices[0].finish_reason == "stop"


_garbage_event = st.tuples(
    st.sampled_from([None, "message_start", "content_block_start", "content_block_delta", "message_delta",
                     "message_stop", "error"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["type", "index", "delta", "message", "content_block", "usage", "choices",
                                      "error", "text", "tool_calls", "finish_reason", "stop_reason"]), inner,
                     max_size=4), max_leaves=15))


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_garbage_event, max_size=8))
def test_odd_provider_events_never_crash_a_translator(events: list[tuple[str | None, Any]]) -> None:
    raw = sse_stream(events)
    for translator in (MessagesStreamToChat(created=NOW), ChatStreamToMessages()):
        out = parse_sse(translate(translator, [raw]))
        assert out, "a stream always ends with something: its end or the truncation error"
