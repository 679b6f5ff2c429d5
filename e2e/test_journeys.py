"""User journeys over real HTTP (issue 8). The test model charges 15 tokens per answer (10 in, 5 out)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from e2e.conftest import Need, World, eventually
from maasctl.gateway.simulate import SimulateRequest, simulate_remote
from maasctl.reconcilers.kinds import LLM_INFERENCE_SERVICE, MAAS_SUBSCRIPTION
from maasctl.tls import default_tls

PER_CALL = 15


async def test_publish_list_mint_and_call(world: World) -> None:
    """Operator publishes an in-cluster and an external model; the user sees exactly the entitled models,
    mints a key and gets answers from both."""
    world.require(Need.INCLUSTER_MODEL)
    ns, stack = world.namespace, world.stack
    assert stack.incluster_model_url is not None
    llm = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
           "metadata": {"name": "granite", "namespace": ns},
           "spec": {"router": {"route": {"http": {"refs": [{"name": "granite-kserve-route"}]}}}}}
    workload = world.workload_service("granite-workload", stack.incluster_model_url)
    port = workload["spec"]["ports"][0]["port"]
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": "granite-kserve-route", "namespace": ns, "labels": {
                 "app.kubernetes.io/name": "granite", "app.kubernetes.io/component": "llminferenceservice-router",
                 "app.kubernetes.io/part-of": "llminferenceservice"}},
             "spec": {"parentRefs": [{"name": stack.settings.gateway_name,
                                      "namespace": stack.settings.gateway_namespace}],
                      "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/granite"}}],
                                 "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                     "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                 "backendRefs": [{"name": "granite-workload", "port": port}]}]}}
    granite_ref = {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
                   "metadata": {"name": "granite", "namespace": ns},
                   "spec": {"modelRef": {"kind": "LLMInferenceService", "name": "granite"}}}
    hidden = {**granite_ref, "metadata": {"name": "hidden", "namespace": ns},
              "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}}
    await world.apply(llm, workload, route, granite_ref, *world.external_model("gpt"), hidden)
    await world.client.patch(
        LLM_INFERENCE_SERVICE, "granite", ns,
        {"status": {"url": f"{stack.gateway_url}/{ns}/granite", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
        subresource="status")
    sub, ap = world.name("team"), world.name("team-access")
    await world.apply(world.auth_policy(ap, ["granite", "gpt"], groups=("premium-users",)),
                      world.subscription(sub, {"granite": [(100000, "1m")], "gpt": [(100000, "1m")]},
                                         groups=("premium-users",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    assert key.startswith("sk-oai-")
    await world.wait_enforced("gpt", key)

    async def entitled() -> bool:
        return await world.models(key) == [f"{ns}/gpt", f"{ns}/granite"]

    await eventually(entitled)
    for model in ("gpt", "granite"):
        resp = await world.chat(model, key)
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"] == "echo: hello"


async def test_limits_per_tier_and_per_user_and_unlimited(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    minute, hour, free = world.name("minute"), world.name("hour"), world.name("free")
    await world.apply(
        world.auth_policy(world.name("ap"), ["gpt"], groups=("premium-users", "free-users"), users=("carol",)),
        world.subscription(minute, {"gpt": [(40, "1m"), (100000, "1h")]}, groups=("premium-users",)),
        world.subscription(hour, {"gpt": [(100000, "1m"), (40, "1h")]}, users=("carol",)),
        world.subscription(free, {"gpt": None}, groups=("free-users",)),
    )
    await world.wait_active(minute, hour, free)
    alice = (await world.mint("alice", subscription=minute))["key"]
    carol = (await world.mint("carol", subscription=hour))["key"]
    bob = (await world.mint("bob", subscription=free))["key"]
    await world.wait_enforced("gpt", alice)
    # alice: 15 (waited above) + 15 + 15 = 45 > 40 -> the next call is refused before reaching the model.
    statuses = [(await world.chat("gpt", alice)).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    # The hour tier is enforced just the same (its limit in the gateway's view before the first call counts).
    await world.wait_in_force("gpt", carol)
    statuses = [(await world.chat("gpt", carol)).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    # The counter is per user, not per key: a second key of alice's is already over the limit.
    second_alice_key = (await world.mint("alice", subscription=minute))["key"]
    assert (await world.chat("gpt", second_alice_key)).status_code == 429
    # An unlimited model never answers 429.
    await world.wait_in_force("gpt", bob)
    statuses = [(await world.chat("gpt", bob)).status_code for _ in range(6)]
    assert statuses == [200] * 6


async def test_simulate_explains_an_unlimited_subscription(world: World) -> None:
    """maasctl's data plane explains which limit applies (`maasctl simulate`): an unlimited subscription is
    still metered under its own limit name."""
    world.require(Need.MAASCTL_DATA_PLANE)
    await world.apply(*world.external_model("gpt"))
    free = world.name("free")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], groups=("free-users",)),
                      world.subscription(free, {"gpt": None}, groups=("free-users",)))
    await world.wait_active(free)
    bob = (await world.mint("bob", subscription=free))["key"]
    await world.wait_enforced("gpt", bob)
    report = await simulate_remote(world.stack.gateway_url, SimulateRequest(model=f"{world.namespace}/gpt", key=bob))
    assert report.to_json()["limits"] == [{"limit_name": f"{world.sub_ns()}-{free}-gpt-tokens", "unlimited": True}]


async def test_independent_counters_for_users_of_one_subscription(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    shared = world.name("shared")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice", "bob")),
                      world.subscription(shared, {"gpt": [(20, "1h")]}, users=("alice", "bob")))
    await world.wait_active(shared)
    alice = (await world.mint("alice", subscription=shared))["key"]
    bob = (await world.mint("bob", subscription=shared))["key"]
    await world.wait_enforced("gpt", alice)
    assert (await world.chat("gpt", alice)).status_code == 200
    assert (await world.chat("gpt", alice)).status_code == 429
    assert (await world.chat("gpt", bob)).status_code == 200


async def test_revoked_key_stops_within_a_second_and_deleted_subscription_keys_stop(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    one, two = world.name("one"), world.name("two")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(one, {"gpt": [(100000, "1m")]}, users=("alice",)),
                      world.subscription(two, {"gpt": [(100000, "1m")]}, users=("alice",)))
    await world.wait_active(one, two)
    revoked = await world.mint("alice", subscription=one)
    doomed = (await world.mint("alice", subscription=one))["key"]
    survivor = (await world.mint("alice", subscription=two))["key"]
    await world.wait_enforced("gpt", revoked["key"])
    await world.wait_enforced("gpt", survivor)

    async with httpx.AsyncClient(base_url=world.stack.api_url, verify=default_tls()) as http:
        resp = await http.delete(f"/v1/api-keys/{revoked['id']}",
                                 headers={"Authorization": f"Bearer {world.token('alice')}"})
    assert resp.status_code in (200, 204), resp.text
    revoked_at = time.monotonic()
    # The rule is the 1 s key-cache TTL: no call started after it is served. (How long the refused call itself
    # takes is the machine's load, not the rule: a whole run's busy cores made one take over 0.5 s.)
    while True:
        started = time.monotonic()
        status = (await world.chat("gpt", revoked["key"])).status_code
        if status != 200:
            break
        assert started - revoked_at < 1.1, "a call started after the key cache's 1 s TTL was served"
        await asyncio.sleep(0.05)
    assert status in (401, 403)

    await world.client.delete(MAAS_SUBSCRIPTION, one, world.sub_ns())

    async def doomed_rejected() -> bool:
        return (await world.chat("gpt", doomed)).status_code in (401, 403)

    await eventually(doomed_rejected, timeout=90)
    assert (await world.chat("gpt", survivor)).status_code == 200


async def test_outsiders_and_forged_identity_headers_are_rejected(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    sub = world.name("premium")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], groups=("premium-users",)),
                      world.subscription(sub, {"gpt": [(100000, "1m")]}, groups=("premium-users",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced("gpt", key)
    assert (await world.chat("gpt", world.token("carol"))).status_code == 403
    forged = await world.chat("gpt", key, headers={"X-MaaS-Username": "admin"})
    assert forged.status_code == 403  # server-decided headers are refused at the edge
    assert forged.json()["error"]["code"] == "forbidden_header"
    switched = await world.chat("gpt", key, headers={"X-MaaS-Subscription": "someone-else"})
    assert switched.status_code == 200  # a key never switches subscription: its binding wins, the header is ignored
    ok = await world.chat("gpt", key, headers={"X-MaaS-Subscription": sub})
    assert ok.status_code == 200


async def test_backend_sees_only_the_resolved_subscription_and_the_upstream_key(world: World) -> None:
    world.require(Need.MODEL_REQUESTS)
    await world.apply(*world.external_model("gpt"))
    sub = world.name("premium")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], groups=("premium-users",)),
                      world.subscription(sub, {"gpt": [(100000, "1m")]}, groups=("premium-users",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced("gpt", key)
    ok = await world.chat("gpt", key, headers={"X-MaaS-Subscription": sub})
    assert ok.status_code == 200
    last = next(r for r in reversed(await world.model_requests()) if r["path"] == "/v1/chat/completions")
    identity = {h for h in last["headers"] if h.startswith("x-maas-")}
    assert identity == {"x-maas-subscription"}
    assert last["headers"]["x-maas-subscription"].endswith(sub)  # server-resolved, not the client's value
    assert last["headers"]["authorization"] == f"Bearer {world.stack.upstream_key}"
    assert key not in json.dumps(last)


async def test_streaming_is_charged_with_and_without_include_usage(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    sub = world.name("stream")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(sub, {"gpt": [(44, "1h")]}, users=("alice",)))
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced("gpt", key)  # 15 tokens
    plain = await world.chat("gpt", key, stream=True)
    assert plain.status_code == 200
    assert '"usage"' not in plain.text.replace('"usage": null', "")  # the client did not ask for usage
    with_usage = await world.chat("gpt", key, stream=True, stream_options={"include_usage": True})
    assert with_usage.status_code == 200 and '"total_tokens": 15' in with_usage.text
    # 45 tokens charged (one plain call, two streamed) > 44: the quota saw both streams.
    assert (await world.chat("gpt", key)).status_code == 429


async def test_key_binds_to_highest_priority_and_header_selects_for_tokens(world: World) -> None:
    world.require(Need.MODEL_REQUESTS)
    await world.apply(*world.external_model("gpt"))
    low, high = world.name("low"), world.name("high")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(low, {"gpt": [(100000, "1m")]}, users=("alice",), priority=1),
                      world.subscription(high, {"gpt": [(100000, "1m")]}, users=("alice",), priority=5))
    await world.wait_active(low, high)
    minted = await world.mint("alice")
    assert minted["subscription"] == high  # the name, as in the reference
    token = world.token("alice")
    await world.wait_enforced("gpt", token)  # a separate gateway process sees the policies a moment later

    async def charged_to() -> str:
        last = next(r for r in reversed(await world.model_requests()) if r["path"] == "/v1/chat/completions")
        return str(last["headers"]["x-maas-subscription"])

    by_priority = await world.chat("gpt", token)
    assert by_priority.status_code == 200, by_priority.text  # a token caller without the header: by priority
    assert (await charged_to()).endswith(high)
    chosen = await world.chat("gpt", token, headers={"X-MaaS-Subscription": low})
    assert chosen.status_code == 200
    assert (await charged_to()).endswith(low)

