"""Pure parts of guardrails: configuration checks, the engine objects, the AuthPolicy filter and its contract."""

from __future__ import annotations

import yaml

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.celcheck import check_cel
from maasctl.builders.guardrails import (
    GuardrailsAttachment,
    build_engine,
    config_problems,
    engine_config_yaml,
    guardrails_filter,
)
from maasctl.builders.refs import ObjectRef
from maasctl.contract.guardrails import ConfigView, GuardModel, SettingsView, binding_from_filters

GOOD = """\
rails:
  input: {flows: [self check input]}
  output: {flows: [self check output]}
prompts:
  - {task: self_check_input, content: "User: {{ user_input }} Block (Yes or No)?"}
  - {task: self_check_output, content: "Bot: {{ bot_response }} Block (Yes or No)?"}
"""
MODEL = GuardModel("main", "openai", "guard", "http://guard:8000/v1", "guard-key", "api-key")


def view(config_yaml: str = GOOD, rails_co: str = "", models: tuple[GuardModel, ...] = (MODEL,)) -> ConfigView:
    return ConfigView("models-as-a-service", "safety", models, config_yaml, rails_co)


def test_a_self_check_config_passes() -> None:
    assert config_problems(view()) == []


def test_problems_are_named() -> None:
    assert "not valid YAML" in config_problems(view("rails: [x"))[0]
    assert any("neither defined in rails.co" in p for p in
               config_problems(view("rails: {input: {flows: [my flow]}}")))
    assert config_problems(view("rails: {input: {flows: [my flow]}}", "define flow my flow\n  bot refuse\n")) == []
    assert any("prompt for task 'self_check_input'" in p for p in
               config_problems(view("rails: {input: {flows: [self check input]}}")))
    assert any("embedding model" in p for p in config_problems(view(GOOD, "define user ask\n  \"hi\"\n")))
    assert any("colang_version" in p for p in config_problems(view("colang_version: '2.x'\n" + GOOD)))
    assert any("model of type main" in p for p in
               config_problems(view(models=(GuardModel("content_safety", "openai", "m", "http://x/v1"),))))


def test_engine_config_never_holds_a_key() -> None:
    rendered = yaml.safe_load(engine_config_yaml(view("models: [{type: main, engine: x, model: y}]\n" + GOOD)))
    assert rendered["models"] == [{"type": "main", "engine": "openai", "model": "guard",
                                   "parameters": {"base_url": "http://guard:8000/v1"},
                                   "api_key_env_var": "GUARDRAILS_SAFETY_MAIN_API_KEY"}]


def test_engine_objects() -> None:
    from maasctl.builders.guardrails import EngineInput

    configmap, deployment, service = build_engine(EngineInput("models-as-a-service", "img", (view(),)))
    assert set(configmap["data"]) == {"safety.config.yml", "server-config.py"}  # config.py: the redaction
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["GUARDRAILS_SAFETY_MAIN_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "guard-key", "key": "api-key"}}
    assert env["HF_HUB_OFFLINE"]["value"] == "1"
    assert pod["volumes"][0]["configMap"]["items"] == [{"key": "server-config.py", "path": "config.py"},
                                                       {"key": "safety.config.yml", "path": "safety/config.yml"}]
    assert service["spec"]["ports"][0]["port"] == 8000


def _policy(att: GuardrailsAttachment | None) -> dict:  # type: ignore[type-arg]
    model = ObjectRef("llm", "gpt")
    inp = AuthPolicyInput(model, ObjectRef("llm", "gpt-route"), (AuthPolicySource(ObjectRef("m", "ap"), ("*",)),),
                          guardrails=guardrails_filter(att))
    policy = build_auth_policy(inp, AuthSettings(maas_api_url="http://maas-api:8080"))
    assert policy is not None
    check_cel(policy)
    return policy


def test_filter_only_while_enabled_and_attached() -> None:
    sub = ObjectRef("models-as-a-service", "gold")
    on = SettingsView("models-as-a-service", "default", enabled=True)
    att = GuardrailsAttachment(on, "http://engine:8000", ((sub, "safety"),), frozenset({"safety"}))
    filters = _policy(att)["spec"]["rules"]["response"]["success"]["filters"]
    assert "guardrails" in filters
    props = filters["guardrails"]["json"]["properties"]
    assert props["failurePolicy"] == {"value": "FailClosed"} and props["url"] == {"value": "http://engine:8000"}
    off = GuardrailsAttachment(SettingsView("models-as-a-service", "default"), "u", ((sub, "safety"),), frozenset())
    assert "guardrails" not in _policy(off)["spec"]["rules"]["response"]["success"]["filters"]
    assert guardrails_filter(GuardrailsAttachment(on, "u", (), frozenset())) is None


def test_binding_contract() -> None:
    assert binding_from_filters({}) is None
    b = binding_from_filters({"guardrails": {"config": "safety", "ready": True, "url": "http://e",
                                             "failurePolicy": "FailOpen", "timeoutSeconds": "3"}})
    assert b is not None and b.ready and b.fail_open and b.timeout == 3.0
    broken = binding_from_filters({"guardrails": "garbage"})
    assert broken is not None and not broken.ready  # refused, never passed
    assert binding_from_filters({"guardrails": {"config": "x", "ready": False, "url": "u"}}).ready is False  # type: ignore[union-attr]
