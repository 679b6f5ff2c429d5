"""The provider plan a route carries (contract.providers): what the controller writes reads back, and anything
it would not write is refused - the data plane never follows a hand-written plan to a destination the
controller would refuse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from maasctl.contract.providers import (
    InvalidPlan,
    ProviderPlan,
    ProviderTarget,
    decode_plan,
    encode_plan,
    plan_of,
    worth_another_attempt,
)

PLAN = ProviderPlan((
    ProviderTarget("openai", "https://api.openai.com/v1", "gpt-4o", secret="openai-key"),
    ProviderTarget("claude", "https://api.anthropic.com/v1", "claude-x", "messages", "x-api-key", "anthropic-key",
                   "token", weight=3),
    ProviderTarget("local", "http://127.0.0.1:8000", "llama", weight=0),
), "weighted", 2)


def _raw(**changes: Any) -> str:
    raw = json.loads(encode_plan(PLAN))
    raw.update(changes)
    return json.dumps(raw)


def _provider(**changes: Any) -> str:
    raw = json.loads(encode_plan(PLAN))
    raw["providers"][0].update(changes)
    return json.dumps(raw)


def test_a_plan_reads_back_as_written() -> None:
    assert decode_plan(encode_plan(PLAN)) == PLAN
    assert plan_of({"maas.opendatahub.io/providers": encode_plan(PLAN)}) == PLAN
    assert plan_of({}) is None and plan_of(None) is None
    assert PLAN.providers[1].chat_url == "https://api.anthropic.com/v1/messages"
    assert PLAN.providers[0].chat_url == "https://api.openai.com/v1/chat/completions"


@pytest.mark.parametrize("text", [
    "not json", "[]", "{}", _raw(providers=[]), _raw(providers=[{"name": "a"}] * 9), _raw(providers="x"),
    _raw(selection="random"), _raw(maxAttempts=0), _raw(maxAttempts=9), _raw(maxAttempts="2"), _raw(maxAttempts=True),
    _provider(name="claude"),  # names repeat
    _provider(name="Open AI"), _provider(name=""), _provider(name=7),
    _provider(url="ftp://api.openai.com/v1"), _provider(url="https://user@api.openai.com/v1"),
    _provider(url="https://api.openai.com/v1?x=1"), _provider(url="https://api.openai.com:99999/v1"),
    _provider(url="http://169.254.169.254/latest"), _provider(url="http://[::ffff:169.254.169.254]/v1"),
    _provider(url="https://kubernetes.default.svc/api"), _provider(url="http://2130706433/v1"),
    _provider(url="http://metadata.google.internal/v1"), _provider(url="https://api.openai.com/v1\r\nx: y"),
    _provider(model='x"y'), _provider(model="a\nb"), _provider(model=""), _provider(model="m" * 254),
    _provider(format="bedrock"), _provider(auth="sigv4"), _provider(weight=-1), _provider(weight=101),
    _provider(weight=1.5), _provider(weight=True), _provider(secret="Bad_Name"), _provider(secretKey="a/b"),
    _raw(providers=[{"name": "a", "url": "https://a.test/v1", "model": "m", "weight": 0}]),  # nobody to try
])
def test_anything_the_controller_would_not_write_is_refused(text: str) -> None:
    with pytest.raises(InvalidPlan):
        decode_plan(text)


@pytest.mark.parametrize(("status", "again"), [
    (429, True), (500, True), (502, True), (503, True), (504, True), (529, True), (599, True),
    (200, False), (201, False), (400, False), (401, False), (403, False), (404, False), (413, False), (422, False),
    (428, False), (499, False), (600, False),
])
def test_which_answers_are_worth_another_provider(status: int, again: bool) -> None:
    assert worth_another_attempt(status) is again
