"""The test model speaks enough OpenAI for the gateway and the journeys."""

from __future__ import annotations

import json

import httpx
import pytest

from maasctl.testmodel import ModelServerConfig, create_app


def client(cfg: ModelServerConfig | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(cfg)), base_url="http://model")


async def test_models_lists_configured_models() -> None:
    async with client(ModelServerConfig(models=("a", "b"))) as http:
        body = (await http.get("/v1/models")).json()
    assert [m["id"] for m in body["data"]] == ["a", "b"]


async def test_chat_completion_reports_configured_usage() -> None:
    cfg = ModelServerConfig(prompt_tokens=7, completion_tokens=3, cached_tokens=2, reasoning_tokens=1)
    async with client(cfg) as http:
        resp = await http.post("/v1/chat/completions",
                               json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}]})
    body = resp.json()
    assert resp.status_code == 200
    assert body["choices"][0]["message"]["content"] == "echo: hi"
    assert body["usage"]["total_tokens"] == 10
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 1


async def test_unknown_model_and_bad_json_are_4xx() -> None:
    async with client() as http:
        missing = await http.post("/v1/completions", json={"model": "nope", "prompt": "x"})
        bad = await http.post("/v1/completions", content=b"{", headers={"content-type": "application/json"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert bad.status_code == 400


def _events(raw: str) -> list[str]:
    return [line[len("data: "):] for line in raw.splitlines() if line.startswith("data: ")]


async def test_stream_sends_usage_only_when_asked() -> None:
    req = {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "a b"}]}
    async with client() as http:
        plain = _events((await http.post("/v1/chat/completions", json=req)).text)
        with_usage = _events((await http.post(
            "/v1/chat/completions", json={**req, "stream_options": {"include_usage": True}})).text)
    assert plain[-1] == "[DONE]"
    assert not any("usage" in json.loads(e) for e in plain[:-1])
    assert json.loads(with_usage[-2])["usage"]["total_tokens"] == 15
    content = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in plain[:-1])
    assert content == "echo: a b"


async def test_upstream_credentials_are_checked_and_headers_recorded() -> None:
    async with client(ModelServerConfig(require_bearer="upstream-key")) as http:
        denied = await http.get("/v1/models")
        ok = await http.get("/v1/models", headers={"Authorization": "Bearer upstream-key", "X-MaaS-Subscription": "s"})
        seen = (await http.get("/debug/requests")).json()
    assert denied.status_code == 401
    assert ok.status_code == 200
    assert seen[-1]["headers"]["x-maas-subscription"] == "s"


async def test_latency_delays_each_completion_and_nothing_else(slept: list[float]) -> None:
    async with client(ModelServerConfig(latency=0.25)) as http:
        await http.get("/v1/models")
        await http.post("/v1/completions", json={"model": "nope", "prompt": "x"})  # refused before generating
        chat = await http.post("/v1/chat/completions",
                               json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}]})
        text = await http.post("/v1/completions", json={"model": "test-model", "prompt": "x"})
    assert chat.status_code == text.status_code == 200
    assert slept.count(0.25) == 2


def test_cli_parses_latency_with_a_zero_default() -> None:
    from maasctl.cli import build_parser

    args = build_parser().parse_args(["testmodel", "--latency", "0.2"])
    assert args.latency == 0.2
    assert build_parser().parse_args(["testmodel"]).latency == 0.0


async def test_embeddings_answer_one_vector_per_input_and_prompt_usage() -> None:
    async with client(ModelServerConfig(prompt_tokens=7)) as http:
        one = (await http.post("/v1/embeddings", json={"model": "test-model", "input": "hi"})).json()
        many = (await http.post("/v1/embeddings", json={"model": "test-model", "input": ["hi", "ho"]})).json()
        unknown = await http.post("/v1/embeddings", json={"model": "nope", "input": "hi"})
    assert [d["index"] for d in many["data"]] == [0, 1]
    assert many["data"][0]["embedding"] == one["data"][0]["embedding"] != many["data"][1]["embedding"]
    assert len(one["data"][0]["embedding"]) == 8
    assert one["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert unknown.status_code == 404


@pytest.mark.parametrize(("body", "knob", "completion"), [
    ({}, None, 5), ({}, "4000", 4000), ({"max_tokens": 256}, "4000", 256),
    ({"max_completion_tokens": 100, "max_tokens": 300}, "4000", 100), ({"max_output_tokens": 7}, "4000", 7),
    ({"max_tokens": "256"}, "4000", 4000), ({}, "lots", 5)])
async def test_completion_knob_is_capped_by_the_stated_bound(body: dict[str, object], knob: str | None,
                                                             completion: int) -> None:
    headers = {"x-testmodel-completion": knob} if knob is not None else {}
    async with client() as http:
        resp = await http.post("/v1/chat/completions", headers=headers,
                               json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}], **body})
        streamed = await http.post("/v1/completions", headers=headers, json={
            "model": "test-model", "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}, **body})
    assert resp.json()["usage"]["completion_tokens"] == completion
    last = [line for line in streamed.text.splitlines() if line.startswith("data: {")][-1]
    assert json.loads(last[6:])["usage"]["completion_tokens"] == completion
