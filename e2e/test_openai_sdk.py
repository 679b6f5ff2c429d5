"""The official `openai` Python package against the one base URL `<gateway>/v1` (issue 33): the model is named
in the body only, as any OpenAI SDK user does it. The test model charges 10 prompt + 5 completion tokens per
answer (10 per embeddings call)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from e2e.conftest import World

PROMPT, COMPLETION = 10, 5


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
    listed = [m.id async for m in client.models.list()]
    assert model in listed

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
