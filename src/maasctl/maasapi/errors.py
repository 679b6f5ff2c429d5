"""JSON errors with a stable `code` and a human `message`; handlers never echo request input (it may
contain a key)."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = structlog.get_logger("maasctl.maasapi")


class ApiError(Exception):
    """An error answered to the client as `{"error": {"code", "message"}}` with `status`."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
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
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        code, message, details = _validation_details(exc)
        return JSONResponse(error_body(code, message, details), status_code=400 if code == "invalid_json" else 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled_error", error_type=type(exc).__name__)
        return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)
