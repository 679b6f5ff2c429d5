"""What both directions share: the refusal a request gets when it cannot be translated, the mapping of stop
reasons, and usage read into one set of dimensions.

Usage convention (the one `dataplane.charge.usage_numbers` reads): input tokens *include* cached ones, as in
OpenAI's `prompt_tokens`; Anthropic reports `input_tokens` *without* cache reads and writes, so a Messages usage
is summed before it is charged, and rating cannot tell which format served.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from maasctl.contract.errors import Refusal
from maasctl.dataplane.body import InvalidBody
from maasctl.dataplane.translate.errors import messages_error_body

__all__ = [
    "CHAT_FINISH_TO_STOP",
    "STOP_TO_CHAT_FINISH",
    "MalformedAnswer",
    "TranslationError",
    "Untranslatable",
    "chat_usage_to_messages",
    "messages_usage_to_chat",
    "reports_usage",
]

STOP_TO_CHAT_FINISH: Final[Mapping[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Messages `stop_reason` -> Chat `finish_reason` (an unknown reason reads as "stop")."""

CHAT_FINISH_TO_STOP: Final[Mapping[str, str]] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""Chat `finish_reason` -> Messages `stop_reason` (an unknown reason reads as "end_turn")."""


class TranslationError(InvalidBody):
    """A request that cannot be put into the other format, answered 400 naming `param` (in the caller's own
    format's spelling), so the client learns what to change instead of getting a silently different answer."""

    code: str = "invalid_request"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.detail = message

    def refusal(self) -> Refusal:
        """The OpenAI-envelope answer (the data plane's one error body)."""
        return Refusal(status=400, code=self.code, message=str(self), param=self.param)

    def messages_body(self) -> bytes:
        """The same refusal in Anthropic's error shape, for the `/v1/messages` door."""
        return messages_error_body(400, str(self))


class Untranslatable(TranslationError):
    """A parameter with no counterpart in the provider's format (refused, never dropped silently)."""

    code = "unsupported_parameter"


class MalformedAnswer(ValueError):
    """A provider's 2xx answer that is not the format it claims (the caller answers 502)."""


def count(value: Any) -> int:
    """A token count as a non-negative int (anything else reads 0: usage must never crash translation)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def reports_usage(usage: Any) -> bool:
    """True when a Messages usage states both counts: otherwise the translated answer carries no usage at all,
    so the data plane charges its conservative estimate instead of reading a missing count as 0 tokens."""
    return isinstance(usage, Mapping) and all(
        isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool) for k in ("input_tokens", "output_tokens"))


def messages_usage_to_chat(usage: Any) -> dict[str, Any]:
    """Messages usage as Chat usage: prompt = input + cache reads + cache writes, cached = cache reads,
    reasoning = thinking tokens, so the usage record's dimensions are the same whichever format served."""
    usage = usage if isinstance(usage, Mapping) else {}
    cached = count(usage.get("cache_read_input_tokens"))
    prompt = count(usage.get("input_tokens")) + cached + count(usage.get("cache_creation_input_tokens"))
    completion = count(usage.get("output_tokens"))
    details = usage.get("output_tokens_details")
    reasoning = count(details.get("thinking_tokens")) if isinstance(details, Mapping) else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


def chat_usage_to_messages(usage: Any) -> dict[str, Any]:
    """Chat usage as Messages usage: input excludes the cached part (reported as cache reads); OpenAI does not
    report cache writes, so those are 0."""
    usage = usage if isinstance(usage, Mapping) else {}
    prompt_details = usage.get("prompt_tokens_details")
    cached = count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, Mapping) else 0
    prompt = count(usage.get("prompt_tokens"))
    out: dict[str, Any] = {"input_tokens": max(prompt - cached, 0), "output_tokens": count(
        usage.get("completion_tokens")), "cache_read_input_tokens": min(cached, prompt),
        "cache_creation_input_tokens": 0}
    completion_details = usage.get("completion_tokens_details")
    if isinstance(completion_details, Mapping) and count(completion_details.get("reasoning_tokens")):
        out["output_tokens_details"] = {"thinking_tokens": count(completion_details.get("reasoning_tokens"))}
    return out


def dumps(value: Any) -> str:
    """Compact JSON, as providers send it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
