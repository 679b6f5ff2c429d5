"""Pure parts of issue 32 item 3: redaction rules, the rendered server config.py, the prompt room check, the
engine-failure reading and the per-caller slots."""

from __future__ import annotations

import pytest

from maasctl.builders.guardrails import SERVER_CONFIG_KEY, EngineInput, build_engine, config_problems
from maasctl.contract.guardrails import MAX_CHECK_CHARS, ConfigView, GuardModel
from maasctl.gateway.guardrails import CallerSlots, caller_of, engine_failure
from maasctl.guardrails_redact import MASK, bounded, redact, secret_values

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
