"""Providers beyond OpenAI-compatible (issue 38): the official `openai` package calls a model whose provider
speaks Anthropic's Messages API (`apiFormat: messages`), on the one base URL and on the model's own path. The
data plane translates the request, the answer, streams and errors; the answer is metered in the same usage
dimensions as an OpenAI provider's. The test model's Messages side answers 10 input + 5 output tokens, built on
the `anthropic` package's own types."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from e2e.conftest import Need, World, eventually
from maasctl.tls import default_tls

MAAS = "maas.opendatahub.io/v1alpha1"
PROMPT, COMPLETION = 10, 5
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _anthropic_model(world: World, name: str) -> list[dict[str, Any]]:
    """An ExternalModel `name` on the test model's Messages side (its key in x-api-key), and its MaaSModelRef."""
    ns = world.namespace
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "anthropic-key", "namespace": ns},
         "stringData": {"api-key": world.stack.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": name, "namespace": ns},
         "spec": {"provider": "anthropic", "apiFormat": "messages", "endpoint": f"{world.stack.model_url}/v1",
                  "targetModel": "gpt-x", "credentialRef": {"name": "anthropic-key"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": name}}},
    ]


async def _publish(world: World, model: str, *subscriptions: str) -> dict[str, str]:
    """The model, alice's access, and a key of each subscription (all of alice)."""
    await world.apply(*_anthropic_model(world, model))
    await world.apply(world.auth_policy(world.name("claude-access"), [model], users=("alice",)),
                      *(world.subscription(sub, {model: [(1_000_000, "1h")]}, users=("alice",))
                        for sub in subscriptions))
    await world.wait_active(*subscriptions)
    keys = {sub: (await world.mint("alice", subscription=sub))["key"] for sub in subscriptions}
    for key in keys.values():
        await world.wait_enforced(model, key)
    return keys


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def _wait_listed(world: World, model: str, key: str) -> None:
    async def listed() -> bool:
        return f"{world.namespace}/{model}" in await world.models(key)

    await eventually(listed, timeout=60, describe=lambda: f"{model} is not listed for its key")


async def _listed_only_where_granted(world: World, keys: dict[str, str]) -> None:
    """maas-api's `GET /v1/models` lists each model (`keys`: model -> alice's key of a subscription with it) for
    alice and not for bob, whose subscription names the models but whom no MaaSAuthPolicy grants them. Neither
    kind of model has an OpenAI listing at its provider: maas-api's probe of `<model path>/v1/models` goes through
    the model's AuthPolicy and the data plane answers it itself, naming the published model and nothing of the
    provider (docs/providers.md, "The model listing")."""
    ns, bob = world.namespace, world.token("bob")
    ungranted = world.name("ungranted")
    await world.apply(world.subscription(ungranted, {m: [(1_000_000, "1h")] for m in keys}, users=("bob",)))
    await world.wait_active(ungranted)
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        for model, key in keys.items():
            await _wait_listed(world, model, key)
            answer = await http.get(f"/{ns}/{model}/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200 and [m["id"] for m in answer.json()["data"]] == [model], answer.text
            assert "gpt-x" not in answer.text and world.stack.upstream_key not in answer.text
            refused = await http.get(f"/{ns}/{model}/v1/models", headers={"Authorization": f"Bearer {bob}"})
            assert refused.status_code == 403, refused.text
    assert not {f"{ns}/{m}" for m in keys} & set(await world.models(bob))


async def test_an_openai_client_on_an_anthropic_format_provider(world: World) -> None:
    model, served, errors = world.name("claude"), world.name("claude-served"), world.name("claude-errors")
    keys = await _publish(world, model, served, errors)
    await _listed_only_where_granted(world, {model: keys[served]})
    client = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=keys[served], max_retries=0,
                                timeout=30)

    chat = await client.chat.completions.create(
        model=model, messages=[{"role": "system", "content": "be brief"}, *_user("hello")])
    assert chat.object == "chat.completion" and chat.model == model  # the provider's name goes back to ours
    assert chat.choices[0].message.content and chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None and (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (PROMPT, COMPLETION)

    stream = await client.chat.completions.create(model=model, messages=_user("tell me a story"), stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].total_tokens == PROMPT + COMPLETION
    assert {c.model for c in chunks} == {model}

    quiet = await client.chat.completions.create(model=model, messages=_user("no usage asked"), stream=True)
    assert [c for c in [chunk async for chunk in quiet] if c.usage is not None] == []  # metered all the same

    tools = await client.chat.completions.create(model=model, messages=_user("what is the weather in Paris?"),
                                                 tools=[WEATHER_TOOL])  # type: ignore[list-item]
    [call] = tools.choices[0].message.tool_calls or []
    assert tools.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

    # What does not translate, and the provider's errors, as the SDK's typed exceptions (another subscription:
    # the served one's usage is checked exactly below).
    bad = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=keys[errors], max_retries=0,
                             timeout=30)
    with pytest.raises(openai.BadRequestError) as refused:
        await bad.chat.completions.create(model=model, messages=_user("hi"), n=2)
    assert refused.value.code == "unsupported_parameter" and "n" in str(refused.value.message)
    with pytest.raises(openai.RateLimitError) as limited:
        await bad.chat.completions.create(model=model, messages=_user("hi"),
                                          extra_headers={"x-testmodel-status": "429"})
    assert limited.value.code == "rate_limit_error"
    with pytest.raises(openai.InternalServerError) as overloaded:  # Anthropic's 529 is 503 for OpenAI clients
        await bad.chat.completions.create(model=model, messages=_user("hi"),
                                          extra_headers={"x-testmodel-status": "529"})
    assert overloaded.value.status_code == 503
    with pytest.raises(openai.NotFoundError):  # no Messages counterpart: no route
        await bad.embeddings.create(model=model, input="x")
    await bad.close()
    await client.close()

    # The model's own path is translated the same way.
    own = await world.chat(model, keys[served])
    assert own.status_code == 200 and own.json()["object"] == "chat.completion"

    # Five answers on the served subscription (wait_enforced's, the chat, two streams, the tool call) and the
    # own-path call: each 10 + 5 tokens, recorded as an OpenAI provider's are.
    if world.stack.missing(Need.ADMIN_TOKEN):
        return
    admin = world.admin_headers()

    async def row() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
            resp = await http.get("/v1/usage/report", params={"range": "1d", "subscription": served},
                                  headers=admin)
        assert resp.status_code == 200, resp.text
        rows = [r for r in resp.json()["data"] if r["subscription"] == f"{world.sub_ns()}/{served}"]
        return rows[0] if rows else {}

    async def recorded() -> bool:
        return (await row()).get("requests") == 6

    await eventually(recorded, timeout=30, describe=lambda: "six requests recorded")
    got = await row()
    assert (got["inputTokens"], got["outputTokens"], got["totalTokens"]) == (6 * PROMPT, 6 * COMPLETION,
                                                                             6 * (PROMPT + COMPLETION))


async def test_the_anthropic_provider_gets_its_key_in_x_api_key_and_never_the_callers(world: World) -> None:
    world.require(Need.MODEL_REQUESTS)
    model, sub = world.name("claude-keys"), world.name("claude-keys")
    keys = await _publish(world, model, sub)
    caller = keys[sub]
    resp = await world.chat(model, caller, headers={"x-api-key": caller, "anthropic-beta": "x"})
    assert resp.status_code == 200, resp.text
    seen = [r for r in await world.model_requests() if r["path"] == "/v1/messages"]
    assert seen
    last = seen[-1]["headers"]
    assert last["x-api-key"] == world.stack.upstream_key
    assert last["anthropic-version"] == "2023-06-01"
    assert "authorization" not in last and "anthropic-beta" not in last
    assert all(caller not in str(v) for r in seen for v in r["headers"].values())


async def test_an_anthropic_client_at_the_messages_door_of_both_kinds_of_model(world: World) -> None:
    """The official `anthropic` package on the base URL (it calls `<base>/v1/messages`, the model named in the
    body): an OpenAI-format model (translated both ways) and a Messages-format one (Messages -> Chat -> Messages,
    so both are metered from the same Chat answer); the data plane's refusals and the provider's errors reach
    it as its typed exceptions."""
    gpt, claude, sub = world.name("door-gpt"), world.name("door-claude"), world.name("door")
    secret, external, ref = world.external_model(gpt)
    external["metadata"]["name"], ref["spec"]["modelRef"]["name"] = gpt, gpt
    await world.apply(secret, external, ref, *_anthropic_model(world, claude))
    await world.apply(world.auth_policy(world.name("door-access"), [gpt, claude], users=("alice",)),
                      world.subscription(sub, {gpt: [(1_000_000, "1h")], claude: [(1_000_000, "1h")]},
                                         users=("alice",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced(gpt, key)
    await world.wait_enforced(claude, key)
    client = anthropic.AsyncAnthropic(base_url=world.stack.gateway_url, api_key=key, max_retries=0, timeout=30)

    for model in (gpt, claude):
        message = await client.messages.create(model=model, max_tokens=64, system="be brief",
                                               messages=[{"role": "user", "content": "hello"}])
        assert message.type == "message" and message.model == model and message.stop_reason == "end_turn"
        assert isinstance(message.content[0], anthropic.types.TextBlock) and message.content[0].text
        # 10 prompt tokens, uncached; 5 out (Anthropic's input excludes cache reads: none here)
        assert (message.usage.input_tokens, message.usage.output_tokens) == (PROMPT, COMPLETION)

        async with client.messages.stream(model=model, max_tokens=64,
                                          messages=[{"role": "user", "content": "tell me a story"}]) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
        assert text and final.stop_reason == "end_turn"
        assert (final.usage.input_tokens, final.usage.output_tokens) == (PROMPT, COMPLETION)

    tools = await client.messages.create(
        model=claude, max_tokens=64, messages=[{"role": "user", "content": "the weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "The weather in a city",
                "input_schema": WEATHER_TOOL["function"]["parameters"]}])  # type: ignore[index]
    [use] = [b for b in tools.content if isinstance(b, anthropic.types.ToolUseBlock)]
    assert tools.stop_reason == "tool_use" and use.name == "get_weather" and use.input == {"city": "Paris"}

    with pytest.raises(anthropic.NotFoundError):  # the data plane's refusal, in Anthropic's shape
        await client.messages.create(model=world.name("no-such-model"), max_tokens=8,
                                     messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as refused:  # no Chat counterpart: refused, never dropped
        await client.messages.create(model=gpt, max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                                     extra_body={"container": "c-1"})
    assert "container" in str(refused.value)
    with pytest.raises(anthropic.RateLimitError):  # the Messages provider's 429 through both translations
        await client.messages.create(model=claude, max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                                     extra_headers={"x-testmodel-status": "429"})
    wrong = anthropic.AsyncAnthropic(base_url=world.stack.gateway_url, api_key="sk-oai-not-a-real-key",
                                     max_retries=0, timeout=30)
    with pytest.raises(anthropic.PermissionDeniedError):
        await wrong.messages.create(model=gpt, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    await wrong.close()
    await client.close()


def _failover_model(world: World, name: str, first: str, fallbacks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An ExternalModel `name` with several providers on the test model (its key for both sides), and its
    MaaSModelRef. `first`: the first provider's endpoint (the provider is named `openai`)."""
    ns = world.namespace
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-key", "namespace": ns},
         "stringData": {"api-key": world.stack.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": name, "namespace": ns},
         "spec": {"provider": "openai", "endpoint": first, "targetModel": "gpt-x",
                  "credentialRef": {"name": f"{name}-key"},
                  "fallbacks": [{**f, "credentialRef": {"name": f"{name}-key"}} for f in fallbacks]}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": name}}},
    ]


async def test_failover_from_failing_providers_to_a_healthy_one_records_one_usage_record(world: World) -> None:
    """One model, three providers (issue 38): the first cannot be reached, the second answers 429, the third
    (Anthropic's format) serves. The openai SDK (and the anthropic SDK at the door) sees one answer per call;
    maas-api holds exactly one usage record per request, naming the provider that served; no provider sees the
    caller's key. A stream that breaks after its first byte is not retried. A model whose every provider fails
    answers the last failure, recorded once and charged nothing."""
    world.require(Need.MODEL_REQUESTS)
    admin = world.admin_headers()
    url = world.stack.model_url
    model, down, sub, down_sub = (world.name("failover"), world.name("all-down"), world.name("failover"),
                                  world.name("all-down"))
    await world.apply(
        *_failover_model(world, model, "http://127.0.0.1:1/v1", [
            {"name": "throttled", "provider": "openai", "endpoint": f"{url}/fail/429/v1", "targetModel": "gpt-x"},
            {"name": "backup", "provider": "anthropic", "apiFormat": "messages", "endpoint": f"{url}/v1",
             "targetModel": "gpt-x"}]),
        *_failover_model(world, down, f"{url}/fail/503/v1", [
            {"name": "also-down", "provider": "openai", "endpoint": f"{url}/fail/429/v1", "targetModel": "gpt-x"}]))
    await world.apply(world.auth_policy(world.name("failover-access"), [model, down], users=("alice",)),
                      world.subscription(sub, {model: [(1_000_000, "1h")]}, users=("alice",)),
                      world.subscription(down_sub, {down: [(1_000_000, "1h")]}, users=("alice",)))
    await world.wait_active(sub, down_sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    down_key = (await world.mint("alice", subscription=down_sub))["key"]
    await world.wait_enforced(model, key)
    # listed by access, not by health: also the model whose every provider fails
    await _listed_only_where_granted(world, {model: key, down: down_key})
    client = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=30)

    chat = await client.chat.completions.create(model=model, messages=_user("hello"))
    assert chat.model == model and chat.choices[0].message.content
    assert chat.usage is not None and (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (PROMPT, COMPLETION)
    stream = await client.chat.completions.create(model=model, messages=_user("a story"), stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert {c.model for c in chunks} == {model}
    assert [c.usage.total_tokens for c in chunks if c.usage is not None] == [PROMPT + COMPLETION]
    quiet = await client.chat.completions.create(model=model, messages=_user("no usage asked"), stream=True)
    assert [c for c in [chunk async for chunk in quiet] if c.usage is not None] == []
    # an Anthropic client at the Messages door of the same model fails over the same way
    door = anthropic.AsyncAnthropic(base_url=world.stack.gateway_url, api_key=key, max_retries=0, timeout=30)
    message = await door.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert message.model == model and message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (PROMPT, COMPLETION)
    await door.close()

    # a stream that breaks after its first byte reaches the client broken: never sent to another provider
    last = max((int(r["seq"]) for r in await world.model_requests()), default=0)
    cut = await client.chat.completions.create(model=model, messages=_user("cut me"), stream=True,
                                               extra_headers={"x-testmodel-stream": "cut"})
    with pytest.raises(openai.APIError):
        _ = [c async for c in cut]
    after = [r for r in await world.model_requests() if int(r["seq"]) > last]  # by number: the log is capped
    assert [r["path"] for r in after].count("/v1/messages") == 1
    await client.close()

    seen = await world.model_requests()
    throttled = [r for r in seen if r["path"] == "/fail/429/v1/chat/completions"]
    backup = [r for r in seen if r["path"] == "/v1/messages" and r.get("model") == "gpt-x"]
    assert throttled and backup
    assert all(r["headers"].get("authorization") == f"Bearer {world.stack.upstream_key}" for r in throttled)
    assert all(r["headers"].get("x-api-key") == world.stack.upstream_key for r in backup)
    assert all(secret not in str(r["headers"]) for r in seen for secret in (key, down_key))

    # every provider failing: the last failure is the answer (the second provider's 429), recorded once
    down_client = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=down_key, max_retries=0,
                                     timeout=30)
    calls = {"n": 0}  # the calls that reached the providers: a refusal before that (route or policies not yet in
    # the gateway's view: 403/404) is not a request the gateway admitted, and it records none

    async def throttled_answer() -> bool:
        try:
            await down_client.chat.completions.create(model=down, messages=_user("hi"))
        except openai.RateLimitError as exc:
            if exc.code != "testmodel_fail":
                return False
            calls["n"] += 1
            return True
        except openai.APIStatusError:
            return False
        raise AssertionError("a model whose every provider fails answered 200")

    await eventually(throttled_answer, timeout=60, describe=lambda: "the all-down model answers the last 429")
    await down_client.close()

    async def records(subscription: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
            resp = await http.get("/v1/usage/records", params={"subscription": subscription, "limit": 100},
                                  headers=admin)
        assert resp.status_code == 200, resp.text
        return list(resp.json())

    async def served_recorded() -> bool:  # wait_enforced's call, the chat, three streams, the door
        return len([r for r in await records(sub) if r["status"] == 200]) == 6

    await eventually(served_recorded, timeout=30, describe=lambda: "six served requests recorded")
    served = [r for r in await records(sub) if r["status"] == 200]
    assert {r["provider"] for r in served} == {"backup"}
    assert len({r["id"] for r in served}) == 6
    assert sorted(r["termination"] for r in served) == ["complete"] * 5 + ["truncated"]
    assert all((r["inputTokens"], r["outputTokens"]) == (PROMPT, COMPLETION) for r in served
               if r["termination"] == "complete")

    async def failures_recorded() -> bool:
        return len(await records(down_sub)) == calls["n"]

    await eventually(failures_recorded, timeout=30, describe=lambda: f"{calls['n']} failed requests recorded")
    failed = await records(down_sub)  # as a single provider's 429 is recorded: its status, nothing charged
    assert {(r["status"], r["provider"], r["chargedTokens"]) for r in failed} == {(429, "also-down", 0)}
