"""Counting cannot be switched off by the client: for each class, several variants, the usage record that
reaches maas-api and the rate-limit counter both agree with what the model reported (15 tokens per answer),
or carry a conservative estimate that says so. Real stack, over HTTP."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
import pytest
from e2e.conftest import World, eventually

from maasctl.tls import default_tls

LIMIT = 1_000_000


async def setup(world: World, **spec: Any) -> tuple[str, str, str]:
    """(key, key id, subscription) for alice on a fresh published model `gpt`."""
    await world.apply(*world.external_model("gpt"))
    sub = world.name("metered")
    subscription = world.subscription(sub, {"gpt": [(LIMIT, "1m")]}, users=("alice",))
    subscription["spec"].update(spec)
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)), subscription)
    await world.wait_active(sub)
    minted = await world.mint("alice", subscription=sub)
    await world.wait_enforced("gpt", minted["key"])
    return str(minted["key"]), str(minted["id"]), f"{world.sub_ns()}/{sub}"


async def counter_used(world: World, key: str) -> int:
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        r = await http.post("/_gateway/simulate", json={"model": f"{world.namespace}/gpt", "key": key})
    assert r.status_code == 200, r.text
    return int(next(x["used"] for x in r.json()["limits"] if x.get("window") == "1m"))


async def records(world: World, key_id: str, count: int) -> list[dict[str, Any]]:
    assert world.stack.admin_token_file is not None
    admin = {"Authorization": f"Bearer {world.stack.admin_token_file.read_text().strip()}"}
    found: list[dict[str, Any]] = []

    async def arrived() -> bool:
        nonlocal found
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
            r = await http.get("/v1/usage/records", params={"keyId": key_id, "limit": 100}, headers=admin)
        assert r.status_code == 200, r.text
        found = r.json()
        return len(found) >= count

    await eventually(arrived, timeout=30)
    return found


async def call(world: World, key: str, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=60, verify=default_tls()) as http:
        return await http.post(f"/{world.namespace}/gpt/v1/{path}", content=body,
                               headers={"Authorization": f"Bearer {key}", **headers})


async def assert_counted_once(world: World, key: str, key_id: str, before: int, expected: int) -> dict[str, Any]:
    latest = (await records(world, key_id, 2))[0]  # wait_enforced made the first record
    assert latest["chargedTokens"] == expected, latest
    assert await counter_used(world, key) == before + expected
    return latest


CONTENT_TYPES = [{"Content-Type": "application/json"}, {"Content-Type": "text/plain"}, {}]


@pytest.mark.parametrize("stream", [True, 1, "true"])
@pytest.mark.parametrize("content_type", CONTENT_TYPES, ids=["json", "text-plain", "none"])
@pytest.mark.parametrize("path", ["chat/completions", "completions"])
async def test_streams_are_counted_whatever_the_request_says(
    world: World, stream: object, content_type: dict[str, str], path: str
) -> None:
    key, key_id, _ = await setup(world)
    before = await counter_used(world, key)
    body = {"model": "gpt-x", "stream": stream, "messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
    r = await call(world, key, path, json.dumps(body).encode(), content_type)
    assert r.status_code == 200 and "text/event-stream" in r.headers["content-type"]
    assert '"usage"' not in r.text  # the client did not ask for usage: the injected chunk is hidden
    record = await assert_counted_once(world, key, key_id, before, 15)
    assert record["streamed"] and not record["estimated"] and record["totalTokens"] == 15


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_answers_are_counted(world: World, encoding: str) -> None:
    key, key_id, _ = await setup(world)
    before = await counter_used(world, key)
    r = await call(world, key, "chat/completions", b'{"model":"gpt-x","messages":[]}',
                   {"Content-Type": "application/json", "x-testmodel-encoding": encoding})
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] == 15  # the client still gets it all
    record = await assert_counted_once(world, key, key_id, before, 15)
    assert not record["estimated"]


@pytest.mark.parametrize("pad", [2_000_000, 5_000_000])
async def test_large_answers_are_counted(world: World, pad: int) -> None:
    key, key_id, _ = await setup(world)
    before = await counter_used(world, key)
    r = await call(world, key, "chat/completions", b'{"model":"gpt-x","messages":[]}',
                   {"Content-Type": "application/json", "x-testmodel-pad": str(pad)})
    assert r.status_code == 200 and len(r.content) > pad
    record = await assert_counted_once(world, key, key_id, before, 15)
    assert not record["estimated"]


@pytest.mark.parametrize(
    ("knobs", "body", "termination"),
    [({"x-testmodel-usage": "omit"}, {"max_tokens": 50}, "complete"),
     ({"x-testmodel-usage": "omit"}, {}, "complete"),
     ({"x-testmodel-usage": "omit"}, {"stream": True, "max_tokens": 40}, "complete"),
     ({"x-testmodel-stream": "cut"}, {"stream": True, "max_tokens": 30}, "truncated")],
    ids=["json-no-usage-max-tokens", "json-no-usage", "stream-no-usage", "stream-cut"],
)
async def test_unreadable_usage_is_charged_a_conservative_estimate_never_one_or_zero(
    world: World, knobs: dict[str, str], body: dict[str, Any], termination: str
) -> None:
    key, key_id, _ = await setup(world)
    before = await counter_used(world, key)
    raw = json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], **body}).encode()
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=60, verify=default_tls()) as http:
        with contextlib.suppress(httpx.HTTPError):  # a cut stream may reach the client as a broken answer
            await http.post(f"/{world.namespace}/gpt/v1/chat/completions", content=raw,
                            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", **knobs})
    latest = (await records(world, key_id, 2))[0]
    ceiling = body.get("max_tokens", 4096)
    assert latest["estimated"] and latest["estimateReason"]
    assert latest["chargedTokens"] >= ceiling + 1 and latest["termination"] == termination, latest
    assert await counter_used(world, key) == before + latest["chargedTokens"]


async def test_records_carry_organization_cost_center_and_subscription_labels(world: World) -> None:
    key, key_id, sub = await setup(world, organization={"id": "org-acme"},
                                   tokenMetadata={"costCenter": "cc-42", "labels": {"tier": "gold"}})
    assert (await world.chat("gpt", key)).status_code == 200
    latest = (await records(world, key_id, 2))[0]
    assert (latest["organizationId"], latest["costCenter"], latest["labels"]) == ("org-acme", "cc-42",
                                                                                  {"tier": "gold"})
    assert latest["subscription"] == sub and latest["model"] == f"{world.namespace}/gpt"


@pytest.mark.parametrize("claimed", ["gpt-x", "granite", "NS/gpt", "", "../gpt"])
async def test_usage_is_recorded_against_the_model_served_not_the_one_the_body_names(world: World,
                                                                                      claimed: str) -> None:
    """Billing is per model: the body's `model` is the caller's claim, so a call to an in-cluster model (its
    KServe route carries no label of ours) names another model, or none, and is still recorded as the model
    whose AuthPolicy admitted it."""
    await world.apply(*world.in_cluster_model("granite"), *world.external_model("gpt"))
    await world.mark_ready("granite")
    sub = world.name("both")
    await world.apply(world.auth_policy(world.name("ap"), ["granite", "gpt"], users=("alice",)),
                      world.subscription(sub, {"granite": [(LIMIT, "1m")], "gpt": [(LIMIT, "1m")]},
                                         users=("alice",)))
    await world.wait_active(sub)
    minted = await world.mint("alice", subscription=sub)
    await world.wait_enforced("granite", minted["key"])
    claimed = claimed.replace("NS", world.namespace)
    body = json.dumps({"model": claimed, "messages": [{"role": "user", "content": "hello"}]}).encode()
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=60, verify=default_tls()) as http:
        response = await http.post(f"/{world.namespace}/granite/v1/chat/completions", content=body,
                                   headers={"Authorization": f"Bearer {minted['key']}",
                                            "Content-Type": "application/json"})
    # The test model serves any of its names (gpt-x, granite) and refuses others: recorded either way.
    assert response.status_code == (200 if claimed in ("gpt-x", "granite") else 404), response.text
    found = await records(world, str(minted["id"]), 2)
    assert {r["model"] for r in found} == {f"{world.namespace}/granite"}
