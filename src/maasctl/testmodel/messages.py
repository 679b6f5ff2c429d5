"""The test model's Anthropic Messages side (`POST /v1/messages`): which requests are Anthropic's, its errors and
checks. The answers themselves are built in `messages_answers.py` from the `anthropic` SDK's own types; that
module is imported on the first Anthropic request only, so a test model that never serves one (most of them:
every stack starts several) does not pay the SDK's second of import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

PATH = "/v1/messages"
TOOL_INPUT: dict[str, object] = {"city": "Paris"}  # what the model "decides" to call its first tool with

# Anthropic's error type for each status it answers with (others: api_error)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                529: "overloaded_error"}


def is_messages_path(path: str) -> bool:
    """Anthropic's side of the server: its own credentials (`x-api-key`), never the OpenAI side's Bearer."""
    return path == PATH or path.startswith(PATH + "/")


def is_anthropic_side(path: str, headers: Mapping[str, str]) -> bool:
    """A request to the Anthropic side: `/v1/messages`, or `/v1/models` asked with `anthropic-version` (Anthropic
    serves its model list at the same path as OpenAI)."""
    return is_messages_path(path) or (path == "/v1/models" and "anthropic-version" in headers)


def error(status: int, message: str, code: str = "") -> JSONResponse:
    """Anthropic's error envelope; the type follows the status as Anthropic's does (`code` is the OpenAI
    side's machine code: Anthropic's envelope has none, so it is dropped)."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status)


def credentials_error(headers: Mapping[str, str], api_key: str | None) -> JSONResponse | None:
    """401 unless the request carries the provider key in `x-api-key` and an `anthropic-version` (when a key is
    configured): the two headers every Anthropic provider call must have."""
    if api_key is None:
        return None
    if headers.get("x-api-key") != api_key:
        return error(401, "invalid x-api-key")
    if not headers.get("anthropic-version"):
        return error(401, "anthropic-version header is required")
    return None


def forced_status(headers: Mapping[str, str]) -> int | None:
    """`x-testmodel-status: N` (400..599): the provider error a test wants translated; None when absent or bad."""
    try:
        status = int(headers.get("x-testmodel-status", ""))
    except ValueError:
        return None
    return status if 400 <= status <= 599 else None


def invalid(body: dict[str, Any]) -> JSONResponse | None:
    """Anthropic requires `max_tokens` (an integer >= 1): a translation that forgets it must fail here too."""
    bound = body.get("max_tokens")
    if bound is None:
        return error(400, "max_tokens: Field required")
    if not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
        return error(400, "max_tokens: must be an integer >= 1")
    return None


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user turn: its string content, or its text blocks (tool results are not text)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(b["text"] for b in content
                             if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
        return ""
    return ""
