"""Whole answers and errors, translated and then read by the official SDK clients (on an in-process transport):
a shape the SDK would not accept, or an error it would not raise as its typed exception, fails here."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import Message
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion

from maasctl.dataplane.charge import usage_numbers
from maasctl.dataplane.translate import (
    MalformedAnswer,
    TranslationError,
    chat_error_to_messages,
    chat_request_to_messages,
    chat_response_to_messages,
    chat_usage_to_messages,
    messages_error_to_chat,
    messages_request_to_chat,
    messages_response_to_chat,
    messages_usage_to_chat,
)

from .translate_sdk import anthropic_client, openai_client, valid_chat_request, valid_messages_request

NOW = 1_790_000_000


def anthropic_message(content: list[dict[str, Any]], stop: str, **usage: int) -> dict[str, Any]:
    """A Messages answer as the provider sends it, built on the SDK's own type."""
    return Message.model_validate({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x", "content": content,
        "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage}}).model_dump(mode="json")


def chat_completion(message: dict[str, Any], finish: str, **usage: Any) -> dict[str, Any]:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": NOW, "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27, **usage}}).model_dump(mode="json")


def messages_provider(answer: dict[str, Any]) -> Any:
    """An OpenAI client's gateway in front of a Messages provider: translate there and back."""
    def handle(body: dict[str, Any]) -> httpx2.Response:
        valid_messages_request(chat_request_to_messages(body, max_tokens_ceiling=100))
        return httpx2.Response(200, json=messages_response_to_chat(answer, created=NOW))
    return handle


def chat_provider(answer: dict[str, Any]) -> Any:
    """The `/v1/messages` door in front of an OpenAI-format model."""
    def handle(body: dict[str, Any]) -> httpx2.Response:
        valid_chat_request(messages_request_to_chat(body))
        return httpx2.Response(200, json=chat_response_to_messages(answer))
    return handle


# --- an OpenAI client on a Messages provider ------------------------------------------------------------


def test_openai_client_reads_a_text_answer_with_cached_usage() -> None:
    answer = anthropic_message([{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}], "end_turn",
                               cache_read_input_tokens=30, cache_creation_input_tokens=2)
    seen: list[dict[str, Any]] = []
    completion = openai_client(messages_provider(answer), seen).chat.completions.create(
        model="claude-x", messages=[{"role": "user", "content": "Hi"}])
    assert completion.choices[0].message.content == "Hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 42
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 30
    assert completion.usage.completion_tokens == 5 and completion.usage.total_tokens == 47


def test_openai_client_reads_tool_calls() -> None:
    answer = anthropic_message([{"type": "text", "text": "Checking."},
                                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}],
                               "tool_use")
    completion = openai_client(messages_provider(answer), []).chat.completions.create(
        model="claude-x", messages=[{"role": "user", "content": "Weather?"}],
        tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id == "toolu_1"
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "Oslo"}


@pytest.mark.parametrize(("stop", "finish"), [("max_tokens", "length"), ("stop_sequence", "stop"),
                                              ("refusal", "content_filter"), ("pause_turn", "stop"),
                                              ("model_context_window_exceeded", "length")])
def test_stop_reasons_become_finish_reasons(stop: str, finish: str) -> None:
    out = messages_response_to_chat(anthropic_message([], stop), created=NOW)
    completion = ChatCompletion.model_validate(out)
    assert completion.choices[0].finish_reason == finish
    assert completion.choices[0].message.content == ""  # empty content: a string, as OpenAI sends it


def test_thinking_is_not_shown_but_counted_as_reasoning() -> None:
    answer = anthropic_message([{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                {"type": "text", "text": "42"}], "end_turn",
                               output_tokens=50)
    answer["usage"]["output_tokens_details"] = {"thinking_tokens": 40}
    out = ChatCompletion.model_validate(messages_response_to_chat(answer, created=NOW))
    assert out.choices[0].message.content == "42"
    assert usage_numbers(out.model_dump()["usage"])["reasoning_tokens"] == 40


@pytest.mark.parametrize("answer", [[], {"type": "error"}, {"type": "message", "content": "x"},
                                    {"type": "message", "content": [1]}])
def test_a_provider_answer_that_is_no_message_is_malformed(answer: Any) -> None:
    with pytest.raises(MalformedAnswer):
        messages_response_to_chat(answer, created=NOW)


# --- an Anthropic client on an OpenAI-format model -------------------------------------------------------


def test_anthropic_client_reads_a_text_answer() -> None:
    answer = chat_completion({"content": "Bonjour"}, "stop", prompt_tokens_details={"cached_tokens": 8})
    message = anthropic_client(chat_provider(answer), []).messages.create(
        model="gpt-x", max_tokens=20, messages=[{"role": "user", "content": "Hi"}])
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "Bonjour"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (
        12, 8, 7)


def test_anthropic_client_reads_tool_calls_even_with_broken_arguments() -> None:
    answer = chat_completion({"content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": '{"city": '}}]}, "tool_calls")
    message = anthropic_client(chat_provider(answer), []).messages.create(
        model="gpt-x", max_tokens=20, messages=[{"role": "user", "content": "Weather?"}],
        tools=[{"name": "w", "input_schema": {"type": "object"}}])
    assert message.stop_reason == "tool_use"
    first, second = message.content
    assert first.type == "tool_use" and first.input == {"city": "Oslo"} and first.id == "call_1"
    assert second.type == "tool_use" and second.input == {"arguments": '{"city": '}


@pytest.mark.parametrize(("message", "finish", "stop", "blocks"), [
    ({"content": None, "refusal": "I can't help with that."}, "stop", "refusal", ["text"]),
    ({"content": ""}, "stop", "end_turn", []),
    ({"content": "abc"}, "length", "max_tokens", ["text"]),
    ({"content": "abc"}, "content_filter", "refusal", ["text"]),
])
def test_chat_answers_as_messages(message: dict[str, Any], finish: str, stop: str, blocks: list[str]) -> None:
    out = Message.model_validate(chat_response_to_messages(chat_completion(message, finish)))
    assert out.stop_reason == stop and [b.type for b in out.content] == blocks


def test_no_choices_is_an_empty_message_and_no_object_is_malformed() -> None:
    empty = chat_completion({"content": "x"}, "stop")
    empty["choices"] = []
    assert Message.model_validate(chat_response_to_messages(empty)).content == []
    with pytest.raises(MalformedAnswer):
        chat_response_to_messages({"object": "chat.completion"})


# --- usage: the same dimensions whichever format served ---------------------------------------------------

_count = st.integers(min_value=0, max_value=10**9)


@given(inp=_count, out=_count, read=_count, write=_count, thinking=_count)
def test_messages_usage_lands_in_the_usage_records_dimensions(inp: int, out: int, read: int, write: int,
                                                              thinking: int) -> None:
    usage = {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": read,
             "cache_creation_input_tokens": write, "output_tokens_details": {"thinking_tokens": thinking}}
    numbers = usage_numbers(messages_usage_to_chat(usage))
    assert numbers["input_tokens"] == inp + read + write
    assert numbers["cached_tokens"] == read and numbers["output_tokens"] == out
    assert numbers["reasoning_tokens"] == thinking and numbers["total_tokens"] == inp + read + write + out


@given(prompt=_count, cached=_count, completion=_count)
def test_chat_usage_survives_the_round_trip_through_messages(prompt: int, cached: int, completion: int) -> None:
    cached = min(cached, prompt)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
             "prompt_tokens_details": {"cached_tokens": cached}}
    there = chat_usage_to_messages(usage)
    assert there["input_tokens"] + there["cache_read_input_tokens"] == prompt
    assert usage_numbers(messages_usage_to_chat(there)) == usage_numbers(usage)


@pytest.mark.parametrize("usage", [None, "x", {"input_tokens": "5", "output_tokens": -1}, {"input_tokens": True}])
def test_malformed_usage_reads_as_zero_not_a_crash(usage: Any) -> None:
    assert messages_usage_to_chat(usage)["prompt_tokens"] == 0


# --- errors -----------------------------------------------------------------------------------------------


def anthropic_error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message},
                       "request_id": "req_1"}).encode()


def failing(status: int, body: bytes) -> Any:
    def handle(_: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": "application/json"})
    return handle


@pytest.mark.parametrize(("status", "body", "exception", "client_status", "code"), [
    (429, anthropic_error("rate_limit_error", "slow down"), openai.RateLimitError, 429, "rate_limit_error"),
    (400, anthropic_error("invalid_request_error", "bad"), openai.BadRequestError, 400, "invalid_request_error"),
    (529, anthropic_error("overloaded_error", "busy"), openai.InternalServerError, 503, "overloaded_error"),
    (500, b"<html>oops</html>", openai.InternalServerError, 500, "upstream_error"),
    (401, anthropic_error("authentication_error", "invalid x-api-key"), openai.InternalServerError, 502,
     "provider_auth_failed"),
])
def test_messages_provider_errors_reach_openai_clients_as_their_typed_exceptions(
        status: int, body: bytes, exception: type[openai.APIStatusError], client_status: int, code: str) -> None:
    mapped_status, mapped = messages_error_to_chat(status, body)
    with pytest.raises(exception) as raised:
        openai_client(failing(mapped_status, mapped), []).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
    assert raised.value.status_code == client_status and raised.value.code == code
    assert b"oops" not in mapped and b"x-api-key" not in mapped  # neither a proxy's page nor the provider's words


@pytest.mark.parametrize(("status", "body", "from_provider", "exception", "client_status"), [
    (429, b'{"error": {"message": "quota", "type": "rate_limit_error", "code": null}}', True,
     anthropic.RateLimitError, 429),
    (404, b'{"error": {"message": "no such model"}}', True, anthropic.NotFoundError, 404),
    (503, b"", True, anthropic.InternalServerError, 503),
    (401, b'{"error": {"message": "bad key"}}', True, anthropic.InternalServerError, 502),
    (401, b'{"error": {"message": "API key missing", "code": "missing_key"}}', False, anthropic.AuthenticationError,
     401),
])
def test_openai_format_errors_reach_anthropic_clients_as_their_typed_exceptions(
        status: int, body: bytes, from_provider: bool, exception: type[anthropic.APIStatusError],
        client_status: int) -> None:
    mapped_status, mapped = chat_error_to_messages(status, body, from_provider=from_provider)
    with pytest.raises(exception) as raised:
        anthropic_client(failing(mapped_status, mapped), []).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert raised.value.status_code == client_status
    assert json.loads(mapped)["type"] == "error"


def test_a_translation_refusal_is_a_bad_request_naming_the_parameter_in_both_sdks() -> None:
    try:
        chat_request_to_messages({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 3},
                                 max_tokens_ceiling=5)
    except TranslationError as refused:
        error = refused
    refusal = error.refusal()
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client(failing(refusal.status, refusal.body), []).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
    assert raised.value.param == "n" and raised.value.code == "unsupported_parameter"
    with pytest.raises(anthropic.BadRequestError) as raised_there:
        anthropic_client(failing(400, error.messages_body()), []).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert "n: " in str(raised_there.value)
