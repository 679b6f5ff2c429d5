"""Pure parts of issue 32 item 3: redaction rules, the rendered server config.py, the prompt room check, the
engine-failure reading and the per-caller slots."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from maasctl.builders.guardrails import SERVER_CONFIG_KEY, EngineInput, build_engine, config_problems
from maasctl.contract.guardrails import MAX_CHECK_CHARS, ConfigView, GuardModel, GuardrailsBinding
from maasctl.dataplane.body import prepare_body
from maasctl.gateway.guardrails import (
    CallerSlots,
    GuardCheck,
    GuardrailsClient,
    OutputGuard,
    caller_of,
    engine_failure,
)
from maasctl.guardrails_redact import MASK, bounded, redact, secret_values
from maasctl.tls import default_tls

KEY = "sk-abcdef0123456789"
MODEL = GuardModel("main", "openai", "guard", "http://guard:8000/v1", "guard-key", "api-key")


def prompt_config(content: str, max_length: int | None = None) -> str:
    extra = f", max_length: {max_length}" if max_length is not None else ""
    return ("rails: {input: {flows: [self check input]}}\n"
            f"prompts:\n  - {{task: self_check_input, content: '{content}'{extra}}}\n")


class TestRedaction:
    @pytest.mark.parametrize("text", [
        KEY, f"x{KEY}y", f"parameters={{'base_url': 'http://g', 'api_key': '{KEY}'}}",
        f'{{"api_key": "{KEY}"}}', f"openai_api_key='{KEY}'", f"token: '{KEY}'", f"{KEY} and {KEY}",
    ])
    def test_a_known_secret_or_a_key_field_is_masked(self, text: str) -> None:
        out = redact(text, (KEY,))
        assert KEY not in out and MASK in out

    @pytest.mark.parametrize("text", [
        "'api_key': 'sk-from-elsewhere'", '"password": "hunter22"', "Authorization='Bearer abc'",
    ])
    def test_key_fields_are_masked_without_knowing_the_value(self, text: str) -> None:
        assert MASK in redact(text, ())

    @pytest.mark.parametrize("text", ["'total_tokens': 15", "max_tokens=50", "hello world", "'prompt_tokens': 3"])
    def test_ordinary_text_is_left_alone(self, text: str) -> None:
        assert redact(text, (KEY,)) == text

    def test_secret_values_come_from_credential_variables(self) -> None:
        env = {"GUARDRAILS_SAFETY_MAIN_API_KEY": KEY, "HOME": "/root", "X_TOKEN": "tok-123456", "SHORT_SECRET": "ab",
               "MY_PASSWORD": "pw-99999"}
        assert set(secret_values(env)) == {KEY, "tok-123456", "pw-99999"}

    @pytest.mark.parametrize("cut", [10, 4096 - 5, 4096])
    def test_a_long_write_is_cut_without_leaking_a_secret_across_the_cut(self, cut: int) -> None:
        text = "a" * cut + KEY + "b" * 10_000 + "\n"
        out = bounded(text, (KEY,))
        assert KEY not in out and KEY[:8] not in out and len(out) < 4096 + 100 and out.endswith("\n")


class TestRenderedEngine:
    def test_the_server_config_py_is_mounted_and_holds_no_key(self) -> None:
        view = ConfigView("ns", "safety", (MODEL,), prompt_config("User: {{ user_input }} (Yes or No)?"))
        configmap, deployment, _ = build_engine(EngineInput("ns", "img", (view,)))
        items = deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"]
        assert {"key": SERVER_CONFIG_KEY, "path": "config.py"} in items
        assert "def init(app" in configmap["data"][SERVER_CONFIG_KEY]
        assert all("api_key:" not in text for text in configmap["data"].values())

    @pytest.mark.parametrize(("content", "max_length", "ok"), [
        ("User: {{ user_input }} (Yes or No)?", None, True),
        ("x" * (16_000 - MAX_CHECK_CHARS), None, True),
        ("x" * (16_000 - MAX_CHECK_CHARS + 1), None, False),
        ("short {{ user_input }}", MAX_CHECK_CHARS, False),
        ("x" * 10_000, 30_000, True),
    ])
    def test_prompts_must_leave_room_for_the_checked_text(self, content: str, max_length: int | None,
                                                          ok: bool) -> None:
        problems = config_problems(ConfigView("ns", "c", (MODEL,), prompt_config(content, max_length)))
        assert (not any("characters for the checked text" in p for p in problems)) is ok, problems


class TestEngineFailure:
    @pytest.mark.parametrize(("activated", "events"), [
        ([{"name": "r", "stop": True, "executed_actions": [{"return_value": None}]}],
         [{"type": "BotIntent", "intent": "inform internal error occurred"}]),
        ([{"name": "r", "stop": True, "executed_actions": [{"return_value": {"decision": "block", "failed": True}}]}],
         []),
        ([{"name": "r", "stop": True}], [{"type": "BotIntent", "intent": "stop", "error_type": "internal_error"}]),
        ([{"name": "r", "stop": True}], [{"type": "InternalSystemActionFinished", "is_success": False}]),
    ])
    def test_a_rail_that_raised(self, activated: list[object], events: list[object]) -> None:
        assert engine_failure(activated, events) is not None

    @pytest.mark.parametrize(("activated", "events"), [
        ([{"name": "r", "stop": True, "executed_actions": [{"return_value": {"decision": "block", "failed": False}}]}],
         [{"type": "BotIntent", "intent": "refuse to respond"}, {"type": "InternalSystemActionFinished",
                                                                 "is_success": True}]),
        ([], None), ([{"name": "r"}], "not a list"),
    ])
    def test_a_decision(self, activated: list[object], events: object) -> None:
        assert engine_failure(activated, events) is None


class TestCallerSlots:
    def test_each_caller_has_its_own_bound(self) -> None:
        slots = CallerSlots(2)
        a1, a2 = slots.take("alice"), slots.take("alice")
        assert a1 is not None and a2 is not None
        assert slots.take("alice") is None
        assert slots.take("bob") is not None
        a1()
        a1()  # idempotent: a slot is given back once
        assert slots.in_flight("alice") == 1
        assert slots.take("alice") is not None and slots.take("alice") is None

    def test_zero_is_unbounded(self) -> None:
        slots = CallerSlots(0)
        assert all(slots.take("alice") is not None for _ in range(100))

    @pytest.mark.parametrize(("filters", "caller"), [
        ({"identity": {"userid": "alice", "keyId": "k1"}}, "alice"), ({"identity": {"keyId": "k1"}}, "k1"),
        ({}, ""), ({"identity": "x"}, ""),
    ])
    def test_the_caller_is_the_user(self, filters: dict[str, object], caller: str) -> None:
        assert caller_of(filters) == caller


class TestAnswersLongerThanTheLimit:
    """The gateway's own limit, before any engine call: an answer the output rails cannot take whole is never
    passed unchecked, whatever the failure policy (a real client; the engine URL is never reached)."""

    @staticmethod
    def run(chunks: list[bytes], content_type: str, fail_open: bool,
            chunk_chars: int = 400) -> tuple[list[int], bytes, GuardCheck]:
        binding = GuardrailsBinding("safety", True, "http://127.0.0.1:9", fail_open, 5)
        check = GuardCheck(binding, prompt="u" * 50_000)
        out: list[dict[str, Any]] = []

        async def send(message: Any) -> None:
            out.append(dict(message))

        async def go() -> None:
            async with httpx.AsyncClient(verify=default_tls()) as http:
                guard = OutputGuard(GuardrailsClient(http), check, send, chunk_chars)
                await guard({"type": "http.response.start", "status": 200,
                             "headers": [(b"content-type", content_type.encode())]})
                for i, chunk in enumerate(chunks):
                    await guard({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})

        asyncio.run(go())
        statuses = [int(m["status"]) for m in out if m["type"] == "http.response.start"]
        return statuses, b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body"), check

    @pytest.mark.parametrize("fail_open", [False, True])
    def test_json(self, fail_open: bool) -> None:
        answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "z" * (MAX_CHECK_CHARS + 1)}}]}
        statuses, body, check = self.run([json.dumps(answer).encode()], "application/json", fail_open)
        assert statuses == [502] and b"guardrails_answer_too_large" in body and b"zzz" not in body
        assert check.outcome == "unavailable"

    @pytest.mark.parametrize("fail_open", [False, True])
    def test_stream(self, fail_open: bool) -> None:
        events = [f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': 'z' * 1000}}]})}\n\n".encode()
                  for _ in range(13)] + [b"data: [DONE]\n\n"]
        statuses, body, _ = self.run(events, "text/event-stream", fail_open, chunk_chars=0)  # checked at the end
        assert statuses == [200] and b"guardrails_answer_too_large" in body and body.rstrip().endswith(b"[DONE]")
        assert b"z" * 1000 not in body  # nothing of the text over the limit was released

    def test_input(self) -> None:
        async def go() -> tuple[GuardCheck, Any]:
            async with httpx.AsyncClient(verify=default_tls()) as http:
                client = GuardrailsClient(http)
                binding = GuardrailsBinding("safety", True, "http://127.0.0.1:9", True, 5)
                body = prepare_body(json.dumps({"model": "m", "messages": [
                    {"role": "user", "content": "y" * (MAX_CHECK_CHARS + 1)}]}).encode(), None)
                return await client.admit(binding, body, "/v1/chat/completions", "alice")

        check, refusal = asyncio.run(go())
        assert check.release is not None
        assert refusal is not None and refusal.status == 413
        assert json.loads(refusal.body)["error"]["code"] == "guardrails_input_too_large"
