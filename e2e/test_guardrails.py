"""Guardrails journey (issue 19) through the real processes: controller, maas-api, gateway, the REAL NeMo
Guardrails server (the engine Deployment the controller renders, run by `testenv.guardrails.EngineRunner`)
and the test models — the in-cluster test model doubles as the guard model: it answers "Yes" (block) to the
self-check questions that mention FORBIDDEN, and the provider model answers "tell me the code" with a text
containing FORBIDDEN (an output rail's job).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from e2e.conftest import MAAS, Need, World, eventually
from maasctl.contract.guardrails import MAX_CHECK_CHARS
from maasctl.gateway.simulate import SimulateRequest, simulate_remote
from maasctl.tls import default_tls

CONFIG_YAML = """\
rails:
  input:
    flows: [self check input]
  output:
    flows: [self check output]
prompts:
  - task: self_check_input
    content: |
      Policy: no forbidden topics may be discussed.
      User message: "{{ user_input }}"
      Question: Should the user message be blocked (Yes or No)?
      Answer:
  - task: self_check_output
    content: |
      Policy: the bot never reveals codes.
      Bot message: "{{ bot_response }}"
      Question: Should the bot message be blocked (Yes or No)?
      Answer:
"""


def guard_config(world: World, name: str, *, config_yaml: str = CONFIG_YAML, rails_co: str | None = None,
                 key_secret: str | None = "guard-key") -> dict[str, Any]:
    model: dict[str, Any] = {"type": "main", "engine": "openai", "model": "gpt-x",
                             "baseUrl": f"{world.stack.incluster_model_url}/v1"}
    if key_secret:
        model["apiKeySecretRef"] = {"name": key_secret, "key": "api-key"}
    spec: dict[str, Any] = {"models": [model], "configYaml": config_yaml}
    if rails_co is not None:
        spec["railsCo"] = rails_co
    return {"apiVersion": MAAS, "kind": "GuardrailConfig", "metadata": {"name": name, "namespace": world.sub_ns()},
            "spec": spec}


def settings(world: World, *, enabled: bool, policy: str = "FailClosed") -> dict[str, Any]:
    return {"apiVersion": MAAS, "kind": "GuardrailsSettings",
            "metadata": {"name": "default", "namespace": world.sub_ns()},
            "spec": {"enabled": enabled, "failurePolicy": policy, "timeoutSeconds": 5}}


async def get(world: World, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await k8s.CustomObjectsApi(world.stack.api).get_namespaced_custom_object(
        "maas.opendatahub.io", "v1alpha1", world.sub_ns(), plural, name)
    return obj


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


async def prompts(world: World) -> list[str]:
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        resp = await http.get(f"{world.stack.model_url}/debug/prompts")
    return list(resp.json())


async def say(world: World, model: str, key: str, text: str, **extra: Any) -> httpx.Response:
    return await world.chat(model, key, messages=[{"role": "user", "content": text}], **extra)


@pytest.mark.local_stack  # kills and resumes the engine process
async def test_guardrails_journey(world: World) -> None:
    world.require(Need.LOCAL_STACK)
    stack = world.stack
    local = stack.local
    assert local is not None
    if local.engine is None:
        pytest.fail("the guardrails engine is not installed: run hack/setup-guardrails.sh (hack/setup.sh does)")
    guarded, open_model = "guarded", "open"
    cfg, sub = world.name("safety"), world.name("gr-sub")
    await world.apply(*world.external_model(guarded), *world.external_model(open_model)[2:])
    subscription = world.subscription(sub, {guarded: [(1_000_000, "1h")], open_model: [(1_000_000, "1h")]},
                                      users=("alice",))
    subscription["spec"]["modelRefs"][0]["guardrails"] = {"enabled": True, "config": cfg}
    await world.apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "guard-key", "namespace": world.sub_ns()},
         "stringData": {"api-key": "guard-model-key"}},
        settings(world, enabled=True), guard_config(world, cfg),
        world.auth_policy(world.name("ap"), [guarded, open_model], users=("alice",)), subscription)

    # The configuration is loaded by the real engine before it is deployed; the settings report it, and which
    # subscription models use it (a later status write when the subscription reaches the reconciler after the
    # configuration: seen once in a whole run, Ready with `usedBy` still empty).
    user = {"subscription": f"{world.sub_ns()}/{sub}", "model": f"{world.namespace}/{guarded}"}
    seen: dict[str, Any] = {}

    async def config_ready() -> bool:
        seen["status"] = status = (await get(world, "guardrailconfigs", cfg)).get("status") or {}
        return status.get("phase") == "Ready" and user in (status.get("usedBy") or [])

    await eventually(config_ready, timeout=90, describe=lambda: f"status: {seen.get('status')}")
    config = await get(world, "guardrailconfigs", cfg)
    assert condition(config, "Valid")["reason"] == "Valid"
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced(open_model, key)
    last: list[httpx.Response] = []

    async def guarded_served() -> bool:  # engine started by the runner, AuthPolicy exported
        last[:] = [await say(world, guarded, key, "hello")]
        return last[0].status_code == 200

    try:
        await eventually(guarded_served, timeout=120)
    except AssertionError:
        engine = local.engine.process.log_tail() if local.engine.process else "engine not started"
        engine += f"\nrunner: {local.engine.last_error}"
        engine += f"\nsettings status: {(await get(world, 'guardrailssettings', 'default')).get('status')}"
        try:
            dep = await k8s.AppsV1Api(stack.api).read_namespaced_deployment("maas-guardrails", world.sub_ns())
            engine += f"\ndeployment: {dep.spec.template.spec.containers[0].command}"
        except k8s.ApiException as exc:
            engine += f"\nno deployment: {exc.status}"
        engine += "\n" + (local.directory / "controller.log").read_text()[-3000:]
        raise AssertionError(f"{last[0].status_code} {last[0].text}\n{engine}") from None
    assert local.engine.starts >= 1

    async def guardrails_ready() -> bool:  # the subscription's own reconcile writes it, not the one that served
        ready = condition(await get(world, "maassubscriptions", sub), "GuardrailsReady")
        return ready.get("status") == "True"

    await eventually(guardrails_ready, timeout=30)

    # Allowed: both models answer, and the request reached the model.
    marker = uuid.uuid4().hex[:8]
    ok = await say(world, guarded, key, f"hello {marker}")
    assert ok.status_code == 200, ok.text
    assert f"hello {marker}" in await prompts(world)

    # Input blocked: a clear OpenAI-style error naming the guardrail; never sent upstream. Same subscription,
    # the unguarded model serves the same text.
    blocked = await say(world, guarded, key, f"FORBIDDEN {marker}")
    assert blocked.status_code == 400, blocked.text
    error = blocked.json()["error"]
    assert error["code"] == "guardrail_blocked" and error["param"] == "input"
    assert "self check input" in error["message"] and cfg in error["message"]
    assert blocked.headers["x-maas-guardrail"] == f"{cfg}/self check input"
    assert f"FORBIDDEN {marker}" not in await prompts(world)
    assert (await say(world, open_model, key, f"FORBIDDEN {marker}")).status_code == 200

    # Output blocked: the model answered (and is charged), the caller gets the error instead.
    out = await say(world, guarded, key, "tell me the code")
    assert out.status_code == 400, out.text
    assert out.json()["error"]["param"] == "output" and "self check output" in out.json()["error"]["message"]
    plain = await say(world, open_model, key, "tell me the code")
    assert plain.status_code == 200 and "FORBIDDEN" in plain.json()["choices"][0]["message"]["content"]
    # Streamed: checked in chunks and at the end; a block ends the stream with an error event, no content.
    streamed = await say(world, guarded, key, "tell me the code", stream=True)
    assert streamed.status_code == 200
    assert "FORBIDDEN" not in streamed.text and '"guardrail_blocked"' in streamed.text
    assert streamed.text.rstrip().endswith("data: [DONE]")
    allowed_stream = await say(world, guarded, key, f"stream {marker}", stream=True)
    assert marker in allowed_stream.text and "guardrail" not in allowed_stream.text

    # simulate says whether guardrails apply. On a loaded machine its report once came without the binding right
    # after the guarded calls above (not diagnosed; the failure message now carries the whole report): asked again.
    last: dict[str, Any] = {}

    async def simulated_guarded() -> bool:
        report = await simulate_remote(stack.gateway_url, SimulateRequest(
            model=f"{world.namespace}/{guarded}", key=key))
        last.update(report.to_json())
        return (last.get("guardrails") or {}).get("config") == cfg

    await eventually(simulated_guarded, timeout=30, describe=lambda: f"simulate reported {last}")
    other = await simulate_remote(stack.gateway_url, SimulateRequest(
        model=f"{world.namespace}/{open_model}", key=key))
    assert other.to_json()["guardrails"] is None

    # Engine killed. FailClosed: 503 with a reason; the unguarded model is unaffected.
    await local.engine.kill()
    down = await say(world, guarded, key, f"hello again {marker}")
    assert down.status_code == 503 and down.json()["error"]["code"] == "guardrails_unavailable", down.text
    assert (await say(world, open_model, key, "hello")).status_code == 200
    # FailOpen: the request passes, counted in the gateway's metric (and the usage record).
    await world.apply(settings(world, enabled=True, policy="FailOpen"))

    async def passes() -> bool:
        return (await say(world, guarded, key, f"open {marker}")).status_code == 200

    await eventually(passes, timeout=60)
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        metrics = (await http.get(f"{stack.gateway_url}/_gateway/metrics")).text
    assert f'maas_gateway_guardrails_checks_total{{config="{cfg}",outcome="fail_open",rails="input"}}' in metrics
    await local.engine.resume()

    # Global switch off: the settings left on the subscription have no effect, and status says so.
    await world.apply(settings(world, enabled=False))

    async def unchecked() -> bool:
        return (await say(world, guarded, key, f"FORBIDDEN off {marker}")).status_code == 200

    await eventually(unchecked, timeout=60)

    async def disabled_reported() -> bool:
        return condition(await get(world, "maassubscriptions", sub), "GuardrailsReady").get("reason") == \
            "GuardrailsDisabled"

    await eventually(disabled_reported, timeout=30)

    async def settings_disabled() -> bool:  # its own reconciler: may report after the subscription's
        return (await get(world, "guardrailssettings", "default"))["status"]["phase"] == "Disabled"

    await eventually(settings_disabled, timeout=30)

    # Invalid configurations are reported and not deployed: one the static checks refuse, one only the real
    # engine refuses (a Colang syntax error).
    bad_yaml, bad_colang = world.name("bad-yaml"), world.name("bad-colang")
    await world.apply(
        guard_config(world, bad_yaml, config_yaml="rails: [unclosed"),
        guard_config(world, bad_colang, key_secret=None, config_yaml="rails:\n  input:\n    flows: [my check]\n",
                     rails_co="define flow my check\n  this is not colang (((\n"))

    async def invalid(name: str, reason: str) -> bool:
        obj = await get(world, "guardrailconfigs", name)
        return (obj.get("status") or {}).get("phase") == "Invalid" and condition(obj, "Valid")["reason"] == reason

    await eventually(lambda: invalid(bad_yaml, "InvalidConfig"), timeout=60)
    await eventually(lambda: invalid(bad_colang, "EngineRejected"), timeout=90)
    message = condition(await get(world, "guardrailconfigs", bad_colang), "Valid")["message"]
    assert "Colang" in message or "colang" in message, message

    # A reference to a missing configuration: a condition on the subscription, and requests are refused.
    await world.apply(settings(world, enabled=True))
    missing = json.loads(json.dumps(subscription))
    missing["spec"]["modelRefs"][0]["guardrails"] = {"enabled": True, "config": world.name("nope")}
    await world.apply(missing)

    async def missing_reported() -> bool:
        return condition(await get(world, "maassubscriptions", sub), "GuardrailsReady").get("reason") == \
            "GuardrailConfigNotFound"

    await eventually(missing_reported, timeout=30)

    async def refused() -> bool:
        resp = await say(world, guarded, key, "hello")
        return resp.status_code == 503 and resp.json()["error"]["code"] == "guardrails_config_unavailable"

    await eventually(refused, timeout=60)
    await world.apply(settings(world, enabled=False))
    # No log of the journey (the engine's, the gateway's, the controller's...) holds a secret it used.
    Guarded(world, guarded, cfg, "guard-model-key", {"alice": key}).assert_no_secret_in_any_log()


# --- issue 32 item 3: secrets, engine errors, input size and the caller's share of the engine -------------

# A template the engine loads but cannot render: the rail raises at every check (as a prompt over the
# template's max_length does), the engine logs its configuration (the guard key the engine copied into it),
# and "stops" with its internal-error message — no rail decided anything.
BROKEN_YAML = CONFIG_YAML.replace('"{{ user_input }}"', '"{{ user_input | no_such_filter }}"').replace(
    '"{{ bot_response }}"', '"{{ bot_response | no_such_filter }}"')
HELD = "x-testmodel-hold"


@dataclass
class Guarded:
    world: World
    model: str
    config: str
    guard_key: str
    keys: dict[str, str]  # user -> API key

    async def say(self, user: str, text: str, **extra: Any) -> httpx.Response:
        return await say(self.world, self.model, self.keys[user], text, **extra)

    async def complete(self, user: str, prompt: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
            return await http.post(f"/{self.world.namespace}/{self.model}/v1/completions",
                                   json={"model": "gpt-x", "prompt": prompt},
                                   headers={"Authorization": f"Bearer {self.keys[user]}"})

    def assert_no_secret_in_any_log(self) -> None:
        """Every log of the stack (the engine's pod log among them) is free of every secret of the journey."""
        local = self.world.stack.local
        assert local is not None
        secrets = {"guard key": self.guard_key, "upstream key": self.world.stack.upstream_key,
                   **{f"{user}'s API key": key for user, key in self.keys.items()}}
        logs = sorted(local.directory.rglob("*.log"))
        assert any(p.parent.name == "guardrails" and p.name == "engine.log" for p in logs), logs
        for path in logs:
            text = path.read_text(errors="replace")
            for what, secret in secrets.items():
                assert secret not in text, f"{what} in {path}"


async def guarded_model(world: World, *, config_yaml: str = CONFIG_YAML, policy: str = "FailClosed",
                        users: tuple[str, ...] = ("alice",)) -> Guarded:
    """A model of its own, guarded by a configuration of its own with a guard key of its own, served."""
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    if local.engine is None:
        pytest.fail("the guardrails engine is not installed: run hack/setup-guardrails.sh (hack/setup.sh does)")
    model, cfg, sub, secret = world.name("g"), world.name("cfg"), world.name("gsub"), world.name("guard")
    guard_key = f"sk-guard-{uuid.uuid4().hex}"
    await world.apply(*world.external_model(model))
    subscription = world.subscription(sub, {model: [(100_000_000, "1h")]}, users=users)
    subscription["spec"]["modelRefs"][0]["guardrails"] = {"enabled": True, "config": cfg}
    await world.apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": world.sub_ns()},
         "stringData": {"api-key": guard_key}},
        settings(world, enabled=True, policy=policy), guard_config(world, cfg, config_yaml=config_yaml,
                                                                   key_secret=secret),
        world.auth_policy(world.name("ap"), [model], users=users), subscription)

    async def config_ready() -> bool:
        return ((await get(world, "guardrailconfigs", cfg)).get("status") or {}).get("phase") == "Ready"

    await eventually(config_ready, timeout=90)
    await world.wait_active(sub)
    keys = {user: (await world.mint(user, subscription=sub))["key"] for user in users}
    guarded = Guarded(world, model, cfg, guard_key, keys)
    engine = local.engine

    async def engine_serves_it() -> bool:  # the runner restarted the engine with this configuration
        async with httpx.AsyncClient(timeout=5, verify=default_tls()) as http:
            try:
                listed = (await http.get(f"{engine.url}/v1/rails/configs")).json()
            except (httpx.HTTPError, ValueError):
                return False
        return isinstance(listed, list) and {"id": cfg} in listed

    await eventually(engine_serves_it, timeout=120, describe=lambda: f"runner: {engine.last_error}")
    last: list[httpx.Response] = []

    async def checked() -> bool:  # the AuthPolicy exports the filter and the engine serves the configuration
        last[:] = [await guarded.say(users[0], "hello")]
        code = last[0].json().get("error", {}).get("code", "") if last[0].status_code != 200 else ""
        return last[0].status_code == 200 or (code.startswith("guardrail")
                                              and code != "guardrails_config_unavailable")

    try:
        await eventually(checked, timeout=120)
    except AssertionError:
        raise AssertionError(f"{last[0].status_code if last else '-'} {last[0].text if last else ''}\n"
                             f"runner: {local.engine.last_error}") from None
    return guarded


async def metric(world: World, line: str) -> bool:
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        return line in (await http.get(f"{world.stack.gateway_url}/_gateway/metrics")).text


@pytest.mark.local_stack
class TestEngineErrorsAreNotBlocks:
    """A rail the engine failed to run is an engine error: FailClosed 503 `guardrails_unavailable` with the
    reason, FailOpen served and counted — never 400 "blocked by guardrail". Its config dump has no key."""

    async def test_fail_closed_refuses_with_the_reason(self, world: World) -> None:
        g = await guarded_model(world, config_yaml=BROKEN_YAML)
        marker = uuid.uuid4().hex[:8]
        answers = {
            "chat": await g.say("alice", f"hello {marker}"),
            "chat with a blocked word": await g.say("alice", f"FORBIDDEN {marker}"),
            "stream": await g.say("alice", f"stream {marker}", stream=True),
            "completions": await g.complete("alice", f"complete {marker}"),
        }
        for shape, resp in answers.items():
            assert resp.status_code == 503, (shape, resp.status_code, resp.text)
            error = resp.json()["error"]
            assert error["code"] == "guardrails_unavailable", (shape, error)
            assert "self check input" in error["message"] and "not a decision" in error["message"], error
            assert "x-maas-guardrail" not in resp.headers and "blocked" not in error["message"]
        assert not [p for p in await prompts(world) if marker in p]  # nothing reached the model
        g.assert_no_secret_in_any_log()
        await world.apply(settings(world, enabled=False))

    async def test_fail_open_serves_and_counts(self, world: World) -> None:
        g = await guarded_model(world, config_yaml=BROKEN_YAML, policy="FailOpen")
        marker = uuid.uuid4().hex[:8]
        for text, extra in ((f"open {marker}", {}), (f"FORBIDDEN open {marker}", {}),
                            (f"open stream {marker}", {"stream": True})):
            resp = await g.say("alice", text, **extra)
            assert resp.status_code == 200, resp.text
            assert marker in resp.text and "guardrail" not in resp.text
        assert f"FORBIDDEN open {marker}" in await prompts(world)
        assert await metric(world, f'maas_gateway_guardrails_checks_total{{config="{g.config}",outcome="fail_open",'
                                   'rails="input"}')
        g.assert_no_secret_in_any_log()
        await world.apply(settings(world, enabled=False))


@pytest.mark.local_stack
class TestInputLongerThanTheEngineAccepts:
    """Guarded input over MAX_CHECK_CHARS is refused with 413 `guardrails_input_too_large` before the engine or
    the model sees it, whatever its shape and whatever the failure policy; input under it is checked."""

    @pytest.mark.parametrize("policy", ["FailClosed", "FailOpen"])
    async def test_refused_with_413(self, world: World, policy: str) -> None:
        g = await guarded_model(world, policy=policy)
        marker = uuid.uuid4().hex[:8]
        over = MAX_CHECK_CHARS + 1
        answers = {
            "one message": await g.say("alice", f"{marker}" + "a" * over),
            "many small messages": await world.chat(g.model, g.keys["alice"], messages=[
                {"role": "user" if i % 2 else "system", "content": f"{marker} " + "b" * 1_000} for i in range(13)]),
            "a tool description": await world.chat(g.model, g.keys["alice"], messages=[
                {"role": "user", "content": marker}], tools=[{"type": "function", "function": {
                    "name": "f", "description": "c" * over, "parameters": {"type": "object"}}}]),
            "completions prompt": await g.complete("alice", marker + "d" * over),
            "an 8 MiB message": await g.say("alice", marker + "e" * (8 * 1024 * 1024 - 4096)),
        }
        for shape, resp in answers.items():
            assert resp.status_code == 413, (shape, resp.status_code, resp.text[:300])
            error = resp.json()["error"]
            assert error["code"] in ("guardrails_input_too_large", "body_too_large"), (shape, error)
            if error["code"] == "guardrails_input_too_large":
                assert str(MAX_CHECK_CHARS) in error["message"], error
        assert answers["one message"].json()["error"]["code"] == "guardrails_input_too_large"
        assert not [p for p in await prompts(world) if marker in p]
        under = await g.say("alice", f"{marker} " + "f" * (MAX_CHECK_CHARS - 2_000))
        assert under.status_code == 200, under.text[:300]
        g.assert_no_secret_in_any_log()
        await world.apply(settings(world, enabled=False))


@pytest.mark.local_stack
class TestOneCallerCannotHoldTheEngine:
    """One user has at most `--guardrails-caller-in-flight` (4) guarded requests in flight per gateway; one more
    is refused with 429 `guardrails_busy` and Retry-After, while other users are served; the slots come back."""

    async def test_the_fifth_concurrent_request_of_one_user_waits(self, world: World) -> None:
        g = await guarded_model(world, users=("alice", "bob"))
        marker = uuid.uuid4().hex[:8]
        hold = f"20.{uuid.uuid4().int % 10**6:06d}"  # seconds; the value tells this test's requests apart
        # each held 20 s at the model after its input rail, which a loaded machine can make slow: not the 30 s default
        held = [asyncio.create_task(g.say("alice", f"held {marker} {i}", headers={HELD: hold}, timeout=90))
                for i in range(4)]
        try:
            async def all_in_flight() -> bool:  # the four passed the input rails and reached the model
                return sum(1 for r in await world.model_requests() if r["headers"].get(HELD) == hold) == 4

            await eventually(all_in_flight, timeout=30)
            for shape, resp in {"chat": await g.say("alice", "one more"),
                                "stream": await g.say("alice", "one more", stream=True),
                                "completions": await g.complete("alice", "one more")}.items():
                assert resp.status_code == 429, (shape, resp.status_code, resp.text)
                assert resp.json()["error"]["code"] == "guardrails_busy" and resp.headers["retry-after"] == "1"
            assert (await g.say("bob", f"bob {marker}")).status_code == 200  # another user is served
        finally:
            done = await asyncio.gather(*held)
        assert [r.status_code for r in done] == [200] * 4
        assert (await g.say("alice", "after")).status_code == 200  # the slots were given back
        g.assert_no_secret_in_any_log()
        await world.apply(settings(world, enabled=False))
