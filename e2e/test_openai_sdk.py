"""The official `openai` Python package against the one base URL `<gateway>/v1` (issue 33): the model is named
in the body only, as any OpenAI SDK user does it - an external model, and an in-cluster (KServe) one. The test
model charges 10 prompt + 5 completion tokens per answer (10 per embeddings call)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from e2e.conftest import Need, World, eventually
from maasctl.localstack import IN_CLUSTER_SERVED_NAME

PROMPT, COMPLETION = 10, 5
SERVED_IN_CLUSTER = IN_CLUSTER_SERVED_NAME
"""A name the in-cluster test model serves (manifests/e2e/testmodels.yaml, localstack) and nothing else publishes
on the base URL: the samples of `maasctl dev` publish `gpt-x` and `granite`."""


def _published_model(world: World, name: str) -> list[dict[str, Any]]:
    """An external model published as `name` (the ExternalModel's and the MaaSModelRef's name): a name no
    other journey publishes, since on the base URL the name alone picks the model."""
    secret, external, ref = world.external_model(name)
    external["metadata"]["name"] = name
    ref["spec"]["modelRef"]["name"] = name
    return [secret, external, ref]


async def test_openai_sdk_on_the_base_url(world: World) -> None:
    model = world.name("sdk-model")
    sub = world.name("sdk")
    await world.apply(*_published_model(world, model))
    await world.apply(world.auth_policy(world.name("sdk-access"), [model], users=("alice",)),
                      world.subscription(sub, {model: [(100000, "1m")]}, users=("alice",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced(model, key)
    base_url = f"{world.stack.gateway_url}/v1"
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)

    # GET /v1/models on the base URL: maas-api's listing of what this key may use.
    async def listed() -> bool:  # maas-api's own informer and probe: the gateway's view can come first
        return model in [m.id async for m in client.models.list()]

    await eventually(listed, 60)

    chat = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}])
    assert chat.model == model  # the provider's name (gpt-x) is rewritten back to the published one
    assert chat.choices[0].message.content
    assert chat.usage is not None and (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (PROMPT, COMPLETION)

    stream = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "tell me"}],
                                                  stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].total_tokens == PROMPT + COMPLETION
    assert {c.model for c in chunks} == {model}

    legacy = await client.completions.create(model=model, prompt="once upon a time")
    assert legacy.choices[0].text and legacy.model == model

    embedded = await client.embeddings.create(model=model, input=["first", "second"])
    assert [e.index for e in embedded.data] == [0, 1]
    assert all(len(e.embedding) > 0 for e in embedded.data)
    assert embedded.usage.prompt_tokens == PROMPT

    # Errors surface as the SDK's typed exceptions.
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model=world.name("no-such-model"),
                                             messages=[{"role": "user", "content": "hi"}])
    for bad_key, error in (("not-a-credential", openai.AuthenticationError),  # no identity: 401
                           ("sk-oai-not-a-real-key", openai.PermissionDeniedError)):  # a key maas-api refuses: 403
        bad = openai.AsyncOpenAI(base_url=base_url, api_key=bad_key, max_retries=0, timeout=30)
        with pytest.raises(error):
            await bad.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        await bad.close()
    # the routing header is the gateway's to set, never a client's: 403 forbidden_header, as the reference answers
    with pytest.raises(openai.PermissionDeniedError) as forged:
        await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                             extra_headers={"x-gateway-model-name": model})
    assert forged.value.code == "forbidden_header"
    await client.close()


async def test_openai_sdk_on_the_base_url_reaches_an_in_cluster_model(world: World) -> None:
    """A KServe model's route is KServe's: the base URL sends a request naming it to the model's own path, so
    that route's AuthPolicy admits it and its TokenRateLimitPolicy counts it - one limit, whichever URL the
    client uses."""
    world.require(Need.INCLUSTER_MODEL)
    model = world.name("kserve-sdk")
    served = SERVED_IN_CLUSTER  # the name clients send: the LLMInferenceService's `spec.model.name`
    sub = world.name("kserve-sdk-sub")
    llm, *rest = world.in_cluster_model(model)
    llm["spec"]["model"] = {"uri": "hf://example/test-model", "name": served}
    await world.apply(llm, *rest)
    await world.mark_ready(model)
    await world.apply(world.auth_policy(world.name("kserve-sdk-access"), [model], users=("alice",)),
                      world.subscription(sub, {model: [(40, "1h")]}, users=("alice",)))  # 1h: a minute rolls over
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    client = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=30)
    messages: Any = [{"role": "user", "content": "hello"}]
    last = {"why": "not called yet"}

    async def reached() -> bool:  # the model's AuthPolicy names it once KServe reported the model's URL
        try:
            chat = await client.chat.completions.create(model=served, messages=messages)
        except openai.APIStatusError as exc:
            last["why"] = f"the base URL answers {exc.status_code}: {exc.body}"
            return False
        assert chat.choices[0].message.content == "echo: hello"
        assert chat.usage is not None and chat.usage.total_tokens == PROMPT + COMPLETION
        return True

    await world.wait_in_force(model, key)  # the limit counts from the first call on
    await eventually(reached, 60, describe=lambda: last["why"])  # 15 tokens of 40
    stream = await client.chat.completions.create(model=served, messages=messages, stream=True,
                                                  stream_options={"include_usage": True})
    usage = [c.usage for c in [chunk async for chunk in stream] if c.usage is not None]
    assert len(usage) == 1 and usage[0].total_tokens == PROMPT + COMPLETION  # 30 of 40
    assert (await world.chat(model, key)).status_code == 200  # the model's own path: 45 of 40
    # One counter: the model's own path and the base URL are both refused now.
    assert (await world.chat(model, key)).status_code == 429
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model=served, messages=messages)
    await client.close()

    # Denied the same way as on the model's own path: bob is not granted the model.
    bob = openai.AsyncOpenAI(base_url=f"{world.stack.gateway_url}/v1", api_key=world.token("bob"), max_retries=0,
                             timeout=30)
    assert (await world.chat(model, world.token("bob"))).status_code == 403
    with pytest.raises(openai.PermissionDeniedError):
        await bob.chat.completions.create(model=served, messages=messages)
    await bob.close()
