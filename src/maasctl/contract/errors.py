"""The data plane's one error answer: `error_body(status, message, code)` and the `Refusal` a stage returns.

Every refusal the data plane gives (the local gateway, the payload processor, guardrails, request limits and
`simulate`'s report of what the gateway would answer) is built here, so a client sees one JSON shape whichever
component refused it: OpenAI's `{"error": {"message", "type", "code", "param"}}`, with `type` derived from the
status the way OpenAI's SDKs map them to their typed exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["ERROR_TYPES", "Refusal", "error_body", "maas_api_error_fields"]

ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    """The JSON body of an error answer (`type` from the status: `ERROR_TYPES`, else `api_error`)."""
    kind = ERROR_TYPES.get(status, "api_error")
    return json.dumps({"error": {"message": message, "type": kind, "code": code, "param": param}}).encode()


@dataclass(frozen=True)
class Refusal:
    """A request answered by the data plane instead of being forwarded. `raw_body` replaces the built body
    where an AuthPolicy states its own (`response.unauthenticated/unauthorized.body`)."""

    status: int
    code: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    param: str | None = None
    raw_body: bytes | None = None

    @property
    def body(self) -> bytes:
        return self.raw_body if self.raw_body is not None else error_body(self.status, self.message, self.code,
                                                                           self.param)


def maas_api_error_fields(body: Any) -> tuple[str, str]:
    """(code, message) of a maas-api error body in either envelope it answers (`maasapi.errors`: the API-key
    endpoints' `{"error": "<message>", "code"}`, the others' `{"error": {"message", "code"}}`); ("", "") when the
    body is neither. The console reads maas-api's refusals with it."""
    if not isinstance(body, dict):
        return "", ""
    err = body.get("error")
    if isinstance(err, str):
        return str(body.get("code") or ""), err
    if isinstance(err, dict):
        return str(err.get("code") or ""), str(err.get("message") or "")
    return "", ""
