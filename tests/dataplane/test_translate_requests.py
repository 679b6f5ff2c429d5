"""Request translation, judged by the SDKs' own param types: OpenAI Chat -> Messages and Messages -> Chat."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.dataplane.translate import (
    DROPPED_CHAT,
    TranslationError,
    Untranslatable,
    chat_request_to_messages,
    messages_request_to_chat,
)

from .translate_sdk import valid_chat_request, valid_messages_request

PNG = "iVBORw0KGgo="


def to_messages(body: dict[str, Any], ceiling: int = 4096) -> dict[str, Any]:
    out = chat_request_to_messages(body, max_tokens_ceiling=ceiling)
    valid_messages_request(out)
    return out


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    out = messages_request_to_chat(body)
    valid_chat_request(out)
    return out


# --- OpenAI Chat -> Messages ---------------------------------------------------------------------------


def test_system_and_developer_messages_become_system_and_max_tokens_falls_back_to_the_ceiling() -> None:
    out = to_messages({"model": "claude", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "Hi"}]}, ceiling=777)
    assert out["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert out["max_tokens"] == 777


@pytest.mark.parametrize(("fields", "expected"), [
    ({"max_tokens": 12}, 12), ({"max_completion_tokens": 30}, 30),
    ({"max_completion_tokens": 30, "max_tokens": 9}, 30)])
def test_the_callers_completion_bound_wins(fields: dict[str, int], expected: int) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
    assert to_messages(body, ceiling=5000)["max_tokens"] == expected


def test_sampling_stop_stream_and_user_map() -> None:
    out = to_messages({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.2,
                       "top_p": 0.9, "stop": "END", "stream": True, "stream_options": {"include_usage": True},
                       "user": "u-1", "n": 1, "seed": 4})
    assert out["temperature"] == 0.2 and out["top_p"] == 0.9
    assert out["stop_sequences"] == ["END"]
    assert out["stream"] is True and "stream_options" not in out
    assert out["metadata"] == {"user_id": "u-1"}
    assert "n" not in out and "seed" not in out


def test_multipart_content_images_and_pdf() -> None:
    out = to_messages({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        {"type": "text", "text": ""}]}]})
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]


def test_tools_tool_choice_tool_calls_and_results() -> None:
    out = to_messages({"model": "m", "parallel_tool_calls": False, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "weather", "description": "Weather at a place",
                                          "parameters": {"type": "object",
                                                         "properties": {"city": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "now"}}],
        "messages": [
            {"role": "user", "content": "Weather in Oslo and the time?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "4 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "12:00"}]},
            {"role": "user", "content": "Thanks"}]})
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert out["tools"][1] == {"name": "now", "input_schema": {"type": "object", "properties": {}}}
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_2", "name": "now", "input": {}}]}
    # both results and the next user text form one user turn, results first
    assert out["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "4 C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "12:00"},
        {"type": "text", "text": "Thanks"}]}
    assert len(out["messages"]) == 3


@pytest.mark.parametrize(("choice", "expected"), [
    ("auto", {"type": "auto"}), ("none", {"type": "none"}),
    ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"})])
def test_tool_choice_variants(choice: Any, expected: dict[str, Any]) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": choice,
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert to_messages(body)["tool_choice"] == expected


def test_empty_messages_are_dropped_and_an_all_empty_conversation_is_refused() -> None:
    out = to_messages({"model": "m", "messages": [{"role": "user", "content": ""}, {"role": "user", "content": "x"},
                                                  {"role": "assistant", "content": ""}]})
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    with pytest.raises(TranslationError) as refused:
        chat_request_to_messages({"model": "m", "messages": [{"role": "user", "content": ""}]},
                                 max_tokens_ceiling=10)
    assert refused.value.param == "messages"


def test_reasoning_effort_and_json_schema_map_to_output_config() -> None:
    out = to_messages({"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "minimal",
                       "response_format": {"type": "json_schema", "json_schema": {
                           "name": "r", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})
    assert out["output_config"] == {"effort": "low", "format": {
        "type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}


@pytest.mark.parametrize(("extra", "param"), [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 3}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"), ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio"), ({"functions": [{"name": "f"}]}, "functions"),
    ({"web_search_options": {}}, "web_search_options"), ({"temperature": 1.5}, "temperature"),
    ({"frobnicate": 1}, "frobnicate"), ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
])
def test_what_does_not_translate_is_refused_naming_the_parameter(extra: dict[str, Any], param: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}
    with pytest.raises(Untranslatable) as refused:
        chat_request_to_messages(body, max_tokens_ceiling=10)
    assert refused.value.param == param
    refusal = refused.value.refusal()
    assert (refusal.status, refusal.param, refusal.code) == (400, param, "unsupported_parameter")


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]},
     "messages[0].content[0].type"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA=="}}]},
     "messages[0].content[0].image_url.url"),
    ({"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}, "messages[0].content[0].file"),
    ({"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
     "messages[0].function_call"),
    ({"role": "function", "name": "f", "content": "x"}, "messages[0].role"),
])
def test_untranslatable_content_is_refused_naming_its_path(message: dict[str, Any], param: str) -> None:
    with pytest.raises(Untranslatable) as refused:
        chat_request_to_messages({"model": "m", "messages": [message]}, max_tokens_ceiling=10)
    assert refused.value.param == param


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": 3, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
])
def test_malformed_requests_are_400_naming_the_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(TranslationError) as refused:
        chat_request_to_messages(body, max_tokens_ceiling=10)
    assert refused.value.param == param


def test_every_dropped_chat_parameter_at_its_neutral_value_is_dropped() -> None:
    neutral = {"metadata": {"a": "b"}, "store": True, "service_tier": "auto", "seed": 1, "prediction": {},
               "prompt_cache_key": "k", "prompt_cache_retention": "24h", "prompt_cache_options": {},
               "safety_identifier": "s", "verbosity": "low", "stream_options": {}, "n": 1, "logprobs": False,
               "top_logprobs": 0, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {},
               "modalities": ["text"], "response_format": {"type": "text"}, "reasoning_effort": "none"}
    assert set(neutral) == set(DROPPED_CHAT)
    out = to_messages({"model": "m", "messages": [{"role": "user", "content": "x"}], **neutral})
    assert set(out) == {"model", "max_tokens", "messages"}


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=3), max_leaves=12)
_role = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
_message = st.fixed_dictionaries({"role": _role}, optional={
    "content": _json, "tool_calls": _json, "tool_call_id": _json, "refusal": _json})


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message | _json, max_size=4), extra=st.dictionaries(
    st.sampled_from(["tools", "tool_choice", "stop", "temperature", "max_tokens", "parallel_tool_calls", "n",
                     "response_format", "reasoning_effort", "user"]), _json, max_size=3))
def test_any_chat_body_translates_to_a_valid_request_or_a_400(messages: list[Any], extra: dict[str, Any]) -> None:
    body = {"model": "m", "messages": messages, **extra}
    try:
        out = chat_request_to_messages(body, max_tokens_ceiling=100)
    except TranslationError:
        return
    valid_messages_request(out)


# --- Messages -> OpenAI Chat ---------------------------------------------------------------------------


def test_messages_request_maps_system_blocks_tools_and_results() -> None:
    out = to_chat({"model": "gpt", "max_tokens": 50, "system": [{"type": "text", "text": "A"},
                                                                 {"type": "text", "text": "B"}],
                   "stop_sequences": ["Z"], "metadata": {"user_id": "u"}, "thinking": {"type": "disabled"},
                   "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
                   "tools": [{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
                   "messages": [
                       {"role": "user", "content": "Weather?"},
                       {"role": "assistant", "content": [{"type": "thinking", "thinking": "...", "signature": "s"},
                                                         {"type": "text", "text": "Let me check."},
                                                         {"type": "tool_use", "id": "t1", "name": "w",
                                                          "input": {"city": "Oslo"}}]},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "4 C"}], "is_error": False},
                           {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
                           {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]})
    assert out["messages"][0] == {"role": "system", "content": "A\n\nB"}
    assert out["messages"][2] == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"city":"Oslo"}'}}]}
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "4 C"}
    assert out["messages"][4] == {"role": "user", "content": [
        {"type": "text", "text": "And tomorrow?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}
    assert out["max_completion_tokens"] == 50 and out["stop"] == ["Z"] and out["user"] == "u"
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["tools"] == [{"type": "function", "function": {"name": "w", "description": "d",
                                                              "parameters": {"type": "object"}}}]
    assert "thinking" not in out


def test_streamed_messages_request_asks_for_the_usage_chunk() -> None:
    out = to_chat({"model": "g", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}


def test_output_config_maps_back() -> None:
    out = to_chat({"model": "g", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                   "output_config": {"effort": "max", "format": {"type": "json_schema", "schema": {"type": "object"}}}})
    assert out["reasoning_effort"] == "xhigh"
    assert out["response_format"]["json_schema"]["schema"] == {"type": "object"}


@pytest.mark.parametrize(("extra", "param"), [
    ({"max_tokens": None}, "max_tokens"), ({"container": "c"}, "container"), ({"mcp_servers": []}, "mcp_servers"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t",
                                                  "content": []}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}]},
     "messages.0.content.0.content.0.type"),
])
def test_messages_parameters_without_a_chat_counterpart_are_refused(extra: dict[str, Any], param: str) -> None:
    body = {"model": "g", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], **extra}
    with pytest.raises(TranslationError) as refused:
        messages_request_to_chat(body)
    assert refused.value.param == param
    assert b'"invalid_request_error"' in refused.value.messages_body()


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "x"])},
                                               optional={"content": _json}) | _json, max_size=4),
       extra=st.dictionaries(st.sampled_from(["system", "tools", "tool_choice", "stop_sequences", "metadata",
                                              "output_config", "stream"]), _json, max_size=3))
def test_any_messages_body_translates_to_a_valid_request_or_a_400(messages: list[Any],
                                                                   extra: dict[str, Any]) -> None:
    try:
        out = messages_request_to_chat({"model": "g", "max_tokens": 10, "messages": messages, **extra})
    except TranslationError:
        return
    valid_chat_request(out)
