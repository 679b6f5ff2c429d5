"""Provider error answers in the caller's format.

A Messages provider's error (`{"type": "error", "error": {"type", "message"}}`) reaches an OpenAI client as the
data plane's one error body (`contract.errors.error_body`), and an OpenAI-format error reaches an Anthropic client
in Anthropic's shape, each SDK raising its typed exception for the status. Statuses are kept, except:
- 529 (Anthropic's "overloaded") is 503 for OpenAI clients, a status their SDKs and proxies know to retry;
- 401/403 from a provider concern the platform's provider key, never the caller's (which never reaches a
  provider), so they are 502 `provider_auth_failed`: a client must not be told its own key is bad.
A body that is no JSON error (an HTML page of a proxy, nothing) keeps the status with a generic message: the
provider's page is not shown to the caller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from maasctl.contract.errors import error_body

__all__ = ["MESSAGES_ERROR_TYPES", "chat_error_to_messages", "messages_error_body", "messages_error_to_chat"]

MESSAGES_ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_MESSAGE_LIMIT: Final = 2000


def messages_error_type(status: int) -> str:
    """Anthropic's error `type` for a status (other 4xx: invalid_request_error, other 5xx: api_error)."""
    if status in MESSAGES_ERROR_TYPES:
        return MESSAGES_ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def messages_error_body(status: int, message: str) -> bytes:
    """An error in Anthropic's shape, as its SDK reads it."""
    return json.dumps({"type": "error", "error": {"type": messages_error_type(status),
                                                  "message": message}}).encode()


def _error_object(body: bytes) -> Mapping[str, Any] | None:
    """The `error` object of a JSON error body, in either format; None when there is none."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, Mapping) else None


def _message(error: Mapping[str, Any] | None, status: int) -> str:
    message = error.get("message") if error is not None else None
    if isinstance(message, str) and message:
        return message[:_MESSAGE_LIMIT]
    return f"the provider answered {status}"


def _provider_auth(status: int) -> bool:
    return status in (401, 403)


def messages_error_to_chat(status: int, body: bytes) -> tuple[int, bytes]:
    """A Messages provider's error as the OpenAI envelope: (status for the client, body). `code` is the
    provider's error type (`overloaded_error`, ...) so a client can still tell them apart."""
    error = _error_object(body)
    if _provider_auth(status):
        return 502, error_body(502, "the provider refused the platform's credential for this model",
                               "provider_auth_failed")
    kind = error.get("type") if error is not None else None
    code = kind if isinstance(kind, str) and kind else "upstream_error"
    client_status = 503 if status == 529 else status
    return client_status, error_body(client_status, _message(error, status), code)


def chat_error_to_messages(status: int, body: bytes, *, from_provider: bool = True) -> tuple[int, bytes]:
    """An OpenAI-format error in Anthropic's shape. `from_provider` False: the data plane's own refusal
    (`Refusal.body`: the caller's key, grant or limits), whose 401/403 are the caller's and kept."""
    if from_provider and _provider_auth(status):
        return 502, messages_error_body(502, "the provider refused the platform's credential for this model")
    return status, messages_error_body(status, _message(_error_object(body), status))
