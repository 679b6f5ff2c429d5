"""JSON errors of maas-api, in the envelope the reference MaaS API answers on the same endpoint (one function,
`error_body`, decides by path):

- `/v1/api-keys` and below: `{"error": "<message>", "code": "<code>", "type": "<class>"}` - the reference's key
  handlers answer `error` as a string (clients test `"..." in body["error"]` and read `body["code"]`);
- everywhere else (`/v1/models`, `/v1/subscriptions`, usage, `/internal`): the OpenAI shape
  `{"error": {"message", "type", "code"}}` the reference's model and subscription handlers answer.

`type` is the error class of the HTTP status (`invalid_request_error`, `authentication_error`,
`permission_error`, `not_found_error`, `server_error`, ...), `code` a stable machine-readable code, `message`
for humans; `details`, when present, sits next to `code`. Schema violations are 400 like the reference (never
422). Handlers never echo request input (it may contain a key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = structlog.get_logger("maasctl.maasapi")


class ApiError(Exception):
    """An error answered to the client as `{"error": {"message", "type", "code"}}` with `status`."""

    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = dict(headers or {})  # e.g. Retry-After on a 429


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    406: "invalid_request_error",
    408: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """The OpenAI-style error class of an HTTP status."""
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


KEYS_PATH: Final = "/v1/api-keys"


def flat_envelope(path: str) -> bool:
    """True where the reference answers `error` as a string: its API-key endpoints."""
    return path == KEYS_PATH or path.startswith(KEYS_PATH + "/")


def error_body(code: str, message: str, details: Any = None, *, status: int = 400, path: str = "") -> dict[str, Any]:
    """The error body for a request to `path` (the envelope the reference answers there)."""
    if flat_envelope(path):
        flat: dict[str, Any] = {"error": message, "code": code, "type": error_type(status)}
        if details is not None:
            flat["details"] = details
        return flat
    body: dict[str, Any] = {"message": message, "type": error_type(status), "code": code}
    if details is not None:
        body["details"] = details
    return {"error": body}


def _validation_details(exc: RequestValidationError) -> tuple[str, str, list[dict[str, Any]]]:
    details = []
    json_invalid = False
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            json_invalid = True
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        details.append({"field": ".".join(loc), "type": err.get("type"), "message": err.get("msg")})
    if json_invalid:
        return "invalid_json", "the request body is not valid JSON", details
    return "invalid_request", "the request does not match the schema", details


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details, status=exc.status, path=request.url.path),
                            status_code=exc.status, headers=exc.headers or None)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        code, message, details = _validation_details(exc)
        return JSONResponse(error_body(code, message, details, path=request.url.path), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return JSONResponse(error_body(code, message, status=exc.status_code, path=request.url.path),
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled_error", error_type=type(exc).__name__)
        return JSONResponse(error_body("internal_error", "internal server error", status=500, path=request.url.path),
                            status_code=500)
