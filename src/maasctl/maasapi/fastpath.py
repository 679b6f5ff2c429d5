"""The gateway's hot path, `POST /internal/v1/api-keys/validate`, served below FastAPI.

Dependency resolution and pydantic request/response handling cost more than the key lookup itself; at
1,000 validations/s on a shared 2-core machine that overhead decides whether requests queue. This ASGI
layer answers exactly that route with the same contract as the FastAPI route it shadows (which stays for
the OpenAPI document): 401 without the gateway's token (`maasapi.gatewayauth`), a JSON object with exactly one
string field `key` (<= 256 chars), 400 `invalid_json` for unparsable bodies, 400 `invalid_request` for other
shapes, 200 with the validation result otherwise.
Access log, metrics and the body limit still wrap it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from maasctl.maasapi.errors import ApiError, error_body

VALIDATE_PATH = "/internal/v1/api-keys/validate"
MAX_KEY_CHARS = 256

INVALID: dict[str, Any] = {
    "valid": False,
    "reason": None,
    "userId": None,
    "username": None,
    "groups": None,
    "keyId": None,
    "keyName": None,
    "subscription": None,
    "labels": None,
}


def _json_content_type(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return True  # FastAPI also parses a body without content type as JSON


def parse_validate_body(raw: bytes, json_ok: bool) -> tuple[int, str | dict[str, Any]]:
    """(200, key) or (status, error body) — the same answers the pydantic model would give."""
    if not json_ok:
        return 400, error_body(
            "invalid_request",
            "the request does not match the schema",
            [{"field": "", "type": "model_attributes_type", "message": "expected a JSON object"}],
        )
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return 400, error_body("invalid_json", "the request body is not valid JSON")
    if not isinstance(data, dict):
        problem = {"field": "", "type": "model_attributes_type", "message": "expected a JSON object"}
    elif set(data) - {"key"}:
        extra = sorted(set(data) - {"key"})[0]
        problem = {"field": extra, "type": "extra_forbidden", "message": "Extra inputs are not permitted"}
    elif "key" not in data:
        problem = {"field": "key", "type": "missing", "message": "Field required"}
    elif not isinstance(data["key"], str):
        problem = {"field": "key", "type": "string_type", "message": "Input should be a valid string"}
    elif len(data["key"]) > MAX_KEY_CHARS:
        problem = {"field": "key", "type": "string_too_long", "message": f"at most {MAX_KEY_CHARS} characters"}
    else:
        return 200, data["key"]
    return 400, error_body("invalid_request", "the request does not match the schema", [problem])


class ValidateFastPath:
    """Serves POST `VALIDATE_PATH`; everything else goes to `app`."""

    def __init__(self, app: ASGIApp, handler: Callable[[str], Any], authorized: Callable[[bytes | None], bool],
                 route: Any = None) -> None:
        self.app = app
        self.handler = handler  # async (key) -> response dict
        self.authorized = authorized  # (Authorization header) -> the caller is the gateway
        self.route = route  # the shadowed FastAPI route, so logs/metrics label it by its template

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != VALIDATE_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self.route is not None:
            scope["route"] = self.route
        auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), None)
        if not self.authorized(auth):
            body = json.dumps(error_body("unauthenticated", "a valid gateway token is required", status=401)).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="maas-api-internal"')]})
            await send({"type": "http.response.body", "body": body})
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        status, result = parse_validate_body(b"".join(chunks), _json_content_type(scope))
        payload: Any = result
        if status == 200 and isinstance(result, str):
            try:
                payload = await self.handler(result)
            except ApiError as exc:
                status, payload = exc.status, error_body(exc.code, exc.message, status=exc.status)
        body = json.dumps(payload, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
