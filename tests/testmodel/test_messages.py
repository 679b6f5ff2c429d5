"""The test model's Anthropic Messages side: the official `anthropic` SDK is the judge of every answer, so the
data plane's OpenAI<->Messages translation is tested against a provider Anthropic's own client accepts."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from anthropic.types import Message, MessageParam, RawMessageStreamEvent, ToolParam
from pydantic import TypeAdapter

from maasctl.testmodel import ModelServerConfig, create_app

_EVENTS = TypeAdapter(RawMessageStreamEvent)
WEATHER_TOOL: ToolParam = {"name": "get_weather", "description": "the weather in a city",
                           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
COSTLY = ModelServerConfig(prompt_tokens=7, completion_tokens=3, cached_tokens=2)


def raw(cfg: ModelServerConfig | None = None, *, raise_app_exceptions: bool = True) -> httpx.AsyncClient:
    app = create_app(cfg)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions),
                             base_url="http://model")


def sdk(cfg: ModelServerConfig | None = None, api_key: str = "sk-provider", *,
        x_api_key: bool = True) -> anthropic.AsyncAnthropic:
    """Anthropic's own client, on an in-process transport to the test model. anthropic 2.16 sends `api_key` as
    `Authorization: Bearer`; Anthropic providers (and the gateway's `x-api-key` upstreams) take `x-api-key`, so
    the client sends the key there too unless a test wants the SDK's default alone."""
    transport = httpx2.ASGITransport(app=create_app(cfg))
    return anthropic.AsyncAnthropic(api_key=api_key, base_url="http://model", max_retries=0,
                                    default_headers={"x-api-key": api_key} if x_api_key else None,
                                    http_client=httpx2.AsyncClient(transport=transport))


def ask(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}


def events(raw_text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE event; the name must agree with the data's type."""
    out = []
    for chunk in raw_text.strip().split("\n\n"):
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), chunk
        parsed = json.loads(data[len("data: "):])
        assert parsed["type"] == name[len("event: "):]
        out.append((parsed["type"], parsed))
    return out


# --- the SDK parses what the test model answers -------------------------------------------------------------


async def test_sdk_parses_a_text_answer_with_the_configured_usage() -> None:
    async with sdk(COSTLY) as client:
        reply = await client.messages.create(model="test-model", max_tokens=64,
                                             messages=[{"role": "user", "content": "hi there"}])
    assert reply.role == "assistant" and reply.model == "test-model" and reply.id.startswith("msg_")
    assert [(b.type, getattr(b, "text", None)) for b in reply.content] == [("text", "echo: hi there")]
    assert reply.stop_reason == "end_turn"
    usage = reply.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens,
            usage.output_tokens) == (5, 2, 0, 3)


async def test_sdk_streams_text_per_word_and_the_final_message_carries_usage() -> None:
    async with sdk(COSTLY) as client, client.messages.stream(
            model="test-model", max_tokens=64, messages=[{"role": "user", "content": "a b c"}]) as stream:
        pieces = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()
    assert pieces == ["echo:", " a", " b", " c"]
    assert final.content[0].type == "text" and final.content[0].text == "echo: a b c"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (5, 2, 3)


async def test_sdk_raw_stream_has_anthropics_event_sequence() -> None:
    async with sdk(COSTLY) as client:
        stream = await client.messages.create(model="test-model", max_tokens=64, stream=True,
                                              messages=[{"role": "user", "content": "a b"}])
        seen = [event async for event in stream]
    assert [e.type for e in seen] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_delta", "content_block_delta", "content_block_stop",
                                      "message_delta", "message_stop"]
    start, delta = seen[0], seen[-2]
    assert start.type == "message_start" and start.message.usage.input_tokens == 5
    assert start.message.usage.output_tokens == 1  # as Anthropic's: the cumulative count comes in message_delta
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens == 3


async def test_sdk_gets_a_tool_call_when_tools_are_offered_and_the_weather_asked() -> None:
    question: list[MessageParam] = [{"role": "user", "content": "What is the Weather in Paris?"}]
    async with sdk() as client:
        reply = await client.messages.create(model="test-model", max_tokens=64, tools=[WEATHER_TOOL],
                                             messages=question)
        async with client.messages.stream(model="test-model", max_tokens=64, tools=[WEATHER_TOOL],
                                          messages=question) as stream:
            final = await stream.get_final_message()
        no_tools = await client.messages.create(model="test-model", max_tokens=64,
                                                messages=question)
    for message in (reply, final):
        assert message.stop_reason == "tool_use"
        [block] = message.content
        assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
        assert block.id.startswith("toolu_")
    assert no_tools.stop_reason == "end_turn" and no_tools.content[0].type == "text"


async def test_sdk_answers_the_tool_result_turn_with_text() -> None:
    """The last user turn holds only a tool result (no text, no "weather"): the tool loop ends."""
    async with sdk() as client:
        reply = await client.messages.create(model="test-model", max_tokens=64, tools=[WEATHER_TOOL], messages=[
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}])
    assert reply.stop_reason == "end_turn" and reply.content[0].type == "text"
    assert reply.content[0].text == "echo: "


async def test_sdk_stream_caps_the_completion_knob_by_max_tokens() -> None:
    async with sdk() as client, client.messages.stream(
            model="test-model", max_tokens=256, messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-testmodel-completion": "4000"}) as stream:
        final = await stream.get_final_message()
    assert final.usage.output_tokens == 256


@pytest.mark.parametrize(("status", "error", "kind"), [
    (400, anthropic.BadRequestError, "invalid_request_error"),
    (401, anthropic.AuthenticationError, "authentication_error"),
    (403, anthropic.PermissionDeniedError, "permission_error"),
    (404, anthropic.NotFoundError, "not_found_error"),
    (413, anthropic.ContentTooLargeError, "request_too_large"),
    (429, anthropic.RateLimitError, "rate_limit_error"),
    (500, anthropic.InternalServerError, "api_error"),
    (503, anthropic.ServiceUnavailableError, "api_error"),
    (529, anthropic.OverloadedError, "overloaded_error")])
async def test_sdk_raises_its_typed_error_for_the_status_knob(status: int, error: type[anthropic.APIStatusError],
                                                              kind: str) -> None:
    async with sdk() as client:
        with pytest.raises(error) as raised:
            await client.messages.create(model="test-model", max_tokens=64, messages=[{"role": "user", "content": "x"}],
                                         extra_headers={"x-testmodel-status": str(status)})
    assert raised.value.status_code == status
    message = f"x-testmodel-status asked for {status}"
    assert raised.value.body == {"type": "error", "error": {"type": kind, "message": message}}


async def test_sdk_raises_not_found_for_an_unknown_model_and_authentication_for_a_wrong_key() -> None:
    cfg = ModelServerConfig(require_api_key="sk-provider")
    async with sdk(cfg) as right, sdk(cfg, api_key="sk-wrong") as wrong:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await right.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.AuthenticationError) as denied:
            await wrong.messages.create(model="test-model", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        ok = await right.messages.create(model="test-model", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert isinstance(missing.value.body, dict) and missing.value.body["error"]["type"] == "not_found_error"
    assert isinstance(denied.value.body, dict) and denied.value.body["error"]["type"] == "authentication_error"
    assert ok.content[0].type == "text" and ok.content[0].text == "echo: x"


async def test_sdk_key_as_bearer_alone_is_refused_where_a_key_is_required() -> None:
    """The provider key goes in `x-api-key`: a Bearer token (the SDK's own default) does not authenticate."""
    cfg = ModelServerConfig(require_api_key="sk-provider")
    async with sdk(cfg, x_api_key=False) as bearer_only:
        with pytest.raises(anthropic.AuthenticationError) as denied:
            await bearer_only.messages.create(model="test-model", max_tokens=8,
                                              messages=[{"role": "user", "content": "x"}])
    assert denied.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": "invalid x-api-key"}}


# --- the shapes, validated strictly by the SDK's types (its client parses leniently) ----------------------


async def test_every_answer_validates_strictly_against_the_sdk_types() -> None:
    async with raw(COSTLY) as http:
        text = await http.post("/v1/messages", json=ask())
        tool = await http.post("/v1/messages", json=ask("weather?", tools=[WEATHER_TOOL]))
        streams = [await http.post("/v1/messages", json=ask(q, stream=True, tools=[WEATHER_TOOL]))
                   for q in ("the weather", "a b")]
    for resp in (text, tool):
        assert resp.status_code == 200
        Message.model_validate(resp.json(), strict=True)
    for resp in streams:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for _, data in events(resp.text):
            _EVENTS.validate_python(data)


# --- requests Anthropic would refuse ----------------------------------------------------------------------


@pytest.mark.parametrize("bound", [None, 0, -1, "64", True, 1.5])
async def test_max_tokens_is_required(bound: object) -> None:
    body = ask()
    if bound is None:
        del body["max_tokens"]
    else:
        body["max_tokens"] = bound
    async with raw() as http:
        resp = await http.post("/v1/messages", json=body)
    assert resp.status_code == 400
    assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in resp.json()["error"]["message"]


async def test_unknown_model_and_bad_json_use_anthropics_envelope() -> None:
    async with raw() as http:
        missing = await http.post("/v1/messages", json=ask(model="nope"))
        bad = await http.post("/v1/messages", content=b"{", headers={"content-type": "application/json"})
        seen = (await http.get("/debug/requests")).json()
    assert missing.status_code == 404
    assert missing.json() == {"type": "error", "error": {"type": "not_found_error",
                                                         "message": "model 'nope' is not served here"}}
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert seen[0]["model"] == "nope"


# --- provider credentials ---------------------------------------------------------------------------------


async def test_api_key_and_version_are_required_on_the_messages_side_only() -> None:
    cfg = ModelServerConfig(require_api_key="sk-provider", require_bearer="bearer-key")
    version = {"anthropic-version": "2023-06-01"}
    async with raw(cfg) as http:
        no_key = await http.post("/v1/messages", json=ask(), headers=version)
        wrong = await http.post("/v1/messages", json=ask(), headers={"x-api-key": "sk-other", **version})
        no_version = await http.post("/v1/messages", json=ask(), headers={"x-api-key": "sk-provider"})
        ok = await http.post("/v1/messages", json=ask(), headers={"x-api-key": "sk-provider", **version})
        openai_with_key = await http.get("/v1/models", headers={"x-api-key": "sk-provider"})
        openai_with_bearer = await http.get("/v1/models", headers={"Authorization": "Bearer bearer-key"})
    for denied in (no_key, wrong, no_version):
        assert denied.status_code == 401
        assert denied.json()["type"] == "error" and denied.json()["error"]["type"] == "authentication_error"
    assert ok.status_code == 200  # no Bearer needed on /v1/messages though require_bearer is set
    assert openai_with_key.status_code == 401 and openai_with_bearer.status_code == 200


async def test_without_a_configured_key_the_messages_side_is_open() -> None:
    async with raw(ModelServerConfig(require_bearer="bearer-key")) as http:
        resp = await http.post("/v1/messages", json=ask())
    assert resp.status_code == 200


# --- the knobs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["200", "600", "lots", ""])
async def test_status_knob_outside_400_to_599_is_ignored(value: str) -> None:
    async with raw() as http:
        resp = await http.post("/v1/messages", json=ask(), headers={"x-testmodel-status": value})
        openai = await http.post("/v1/chat/completions", json=ask(), headers={"x-testmodel-status": "429"})
    assert resp.status_code == 200
    assert openai.status_code == 200  # the knob is the Messages side's only


async def test_usage_omit_leaves_usage_out_of_json_and_streams() -> None:
    omit = {"x-testmodel-usage": "omit"}
    async with raw() as http:
        plain = await http.post("/v1/messages", json=ask(), headers=omit)
        streamed = events((await http.post("/v1/messages", json=ask("a b", stream=True), headers=omit)).text)
    assert plain.status_code == 200 and "usage" not in plain.json()
    assert plain.json()["content"] == [{"type": "text", "text": "echo: hi"}]
    by_type = dict(streamed)
    assert "usage" not in by_type["message_start"]["message"] and "usage" not in by_type["message_delta"]
    assert by_type["message_delta"]["delta"]["stop_reason"] == "end_turn"
    assert streamed[-1][0] == "message_stop"


async def test_stream_cut_breaks_off_before_usage_and_message_stop() -> None:
    async with raw(raise_app_exceptions=False) as http:
        resp = await http.post("/v1/messages", json=ask("a b", stream=True), headers={"x-testmodel-stream": "cut"})
    names = [name for name, _ in events(resp.text)]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta"]
    async with raw() as http:
        with pytest.raises(ConnectionResetError):
            await http.post("/v1/messages", json=ask(stream=True), headers={"x-testmodel-stream": "cut"})


async def test_encoding_and_pad_knobs_apply_to_json_answers() -> None:
    async with raw() as http:
        resp = await http.post("/v1/messages", json=ask(), headers={"x-testmodel-encoding": "gzip",
                                                                    "x-testmodel-pad": "1000"})
    assert resp.headers["content-encoding"] == "gzip"  # httpx decodes it: the JSON below went compressed
    assert resp.json()["content"][0]["text"] == "echo: hi" + "x" * 1000


@pytest.mark.parametrize(("bound", "knob", "completion"), [(64, None, 5), (64, "40", 40), (30, "4000", 30),
                                                           (64, "lots", 5)])
async def test_completion_knob_is_capped_by_max_tokens(bound: int, knob: str | None, completion: int) -> None:
    headers = {"x-testmodel-completion": knob} if knob is not None else {}
    async with raw() as http:
        plain = await http.post("/v1/messages", json=ask(max_tokens=bound), headers=headers)
        streamed = await http.post("/v1/messages", json=ask(max_tokens=bound, stream=True), headers=headers)
    assert plain.json()["usage"]["output_tokens"] == completion
    assert dict(events(streamed.text))["message_delta"]["usage"]["output_tokens"] == completion


async def test_hold_and_latency_delay_the_answer(slept: list[float]) -> None:
    async with raw(ModelServerConfig(latency=0.25)) as http:
        await http.post("/v1/messages", json={**ask(), "max_tokens": 0})  # refused before generating
        resp = await http.post("/v1/messages", json=ask(), headers={"x-testmodel-hold": "1.5"})
    assert resp.status_code == 200
    assert slept.count(0.25) == 1 and slept.count(1.5) == 1


async def test_the_last_user_turn_is_answered_and_recorded() -> None:
    turns = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": [{"type": "text", "text": "one"},
                                          {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
                                          {"type": "text", "text": "two"}]},
             {"role": "assistant", "content": "The answer is"}]
    async with raw() as http:
        resp = await http.post("/v1/messages", json={"model": "test-model", "max_tokens": 8, "messages": turns})
        prompts = (await http.get("/debug/prompts")).json()
        seen = (await http.get("/debug/requests")).json()
    assert resp.json()["content"][0]["text"] == "echo: one\ntwo"
    assert prompts == ["one\ntwo"]
    assert seen[-1]["path"] == "/v1/messages" and seen[-1]["model"] == "test-model"


async def test_replies_and_guard_questions_answer_as_on_the_openai_side() -> None:
    cfg = ModelServerConfig(replies=(("say it", "forbidden words"),), block_words=("bomb",))
    async with sdk(cfg) as client:
        fixed = await client.messages.create(model="test-model", max_tokens=8,
                                             messages=[{"role": "user", "content": "say it"}])
        guard = await client.messages.create(model="test-model", max_tokens=8,
                                             messages=[{"role": "user", "content": "a bomb? Yes or No"}])
    assert fixed.content[0].type == "text" and fixed.content[0].text == "forbidden words"
    assert guard.content[0].type == "text" and guard.content[0].text == "Yes"


async def test_the_anthropic_side_lists_its_models_with_x_api_key() -> None:
    """Anthropic serves its model list at /v1/models too: asked with anthropic-version it needs x-api-key and
    answers Anthropic's page, which the SDK reads."""
    cfg = ModelServerConfig(models=("gpt-x", "granite"), require_bearer="bearer-key", require_api_key="anthropic-key")
    async with raw(cfg) as http:
        listed = await http.get("/v1/models", headers={"x-api-key": "anthropic-key", "anthropic-version": "2023-06-01"})
        wrong = await http.get("/v1/models", headers={"x-api-key": "other", "anthropic-version": "2023-06-01"})
        openai_side = await http.get("/v1/models", headers={"authorization": "Bearer bearer-key"})
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == ["gpt-x", "granite"]
    assert listed.json()["data"][0]["type"] == "model" and listed.json()["has_more"] is False
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    assert openai_side.status_code == 200 and openai_side.json()["object"] == "list"


@pytest.mark.parametrize(("path", "status", "kind"), [
    ("/fail/503/v1/chat/completions", 503, None), ("/fail/429/v1/messages", 429, "rate_limit_error"),
    ("/fail/529/openai/v1/chat/completions", 529, None), ("/fail/500/v1/messages", 500, "api_error"),
])
async def test_a_path_under_fail_answers_that_status_in_the_apis_envelope(path: str, status: int,
                                                                         kind: str | None) -> None:
    async with raw(ModelServerConfig(require_bearer="k", require_api_key="k")) as http:
        resp = await http.post(path, json={"model": "test-model", "messages": []})
        assert resp.status_code == status
        body = resp.json()
        assert body["error"]["type"] == kind if kind else body["error"]["code"] == "testmodel_fail"
        assert (await http.get("/debug/requests")).json()[-1]["path"] == path
        for other in ("/fail/200/v1/chat/completions", "/fail/x/v1/chat/completions", "/v1/fail/503/chat"):
            assert (await http.post(other, json={})).status_code in (401, 404)
