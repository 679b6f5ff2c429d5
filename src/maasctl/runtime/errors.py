"""Typed errors for Kubernetes API calls, so callers never parse strings.

::

    Exception
    ├── ApiError                 any non-2xx reply from the API server
    │   ├── Unauthorized         401
    │   ├── Forbidden            403
    │   ├── NotFound             404
    │   ├── Conflict             409 (optimistic lock, AlreadyExists, SSA conflict)
    │   ├── Gone                 410 (resourceVersion too old: re-list)
    │   ├── Invalid              422 (with field causes)
    │   ├── TooManyRequests      429
    │   └── ServerError          5xx
    ├── NotLeader                a write was attempted while not holding the lease
    ├── LeaderElectionLost       the lease was lost; the manager stops
    └── TerminalError            a reconcile failure that retrying cannot fix
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiError",
    "Cause",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "LeaderElectionLost",
    "NotFound",
    "NotLeader",
    "ServerError",
    "TerminalError",
    "TooManyRequests",
    "Unauthorized",
    "error_from_response",
]


@dataclass(frozen=True, slots=True)
class Cause:
    """One field-level cause of an Invalid reply (``status.details.causes[]``)."""

    field: str
    reason: str
    message: str


class ApiError(Exception):
    """A non-2xx reply from the API server.

    Attributes: ``status`` (HTTP code), ``reason`` (Status.reason such as ``AlreadyExists``), ``message``.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Unauthorized(ApiError):
    """401: the credentials were rejected."""


class Forbidden(ApiError):
    """403: the user may not do this (RBAC or admission)."""


class NotFound(ApiError):
    """404: the object, or its API (CRD not installed), does not exist."""


class Conflict(ApiError):
    """409: stale resourceVersion, object already exists, or an SSA field conflict."""


class Gone(ApiError):
    """410: the requested resourceVersion is no longer available; re-list."""


class Invalid(ApiError):
    """422: the object failed validation; ``causes`` names the fields."""

    def __init__(self, status: int, reason: str, message: str, causes: tuple[Cause, ...] = ()) -> None:
        detail = "; ".join(f"{c.field}: {c.message}" for c in causes)
        super().__init__(status, reason, f"{message} ({detail})" if detail else message)
        self.causes = causes


class TooManyRequests(ApiError):
    """429: the server asked us to slow down."""


class ServerError(ApiError):
    """5xx, or a reply that was not a Kubernetes Status."""


class NotLeader(Exception):
    """A write was refused locally because this replica does not hold the leader lease."""


class LeaderElectionLost(Exception):
    """The leader lease was lost; the manager stops so a fresh process can compete again."""


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix: it is logged and counted but not requeued."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: TooManyRequests,
}


def error_from_response(status: int, body: bytes | str | Mapping[str, Any] | None) -> ApiError:
    """Build the typed error for an HTTP status and a (possibly non-JSON) Status body."""
    payload: Any = body
    if isinstance(body, bytes | str):
        try:
            payload = json.loads(body)
        except ValueError:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
            payload = {"message": text[:500]}
    if not isinstance(payload, Mapping):
        payload = {}
    reason = str(payload.get("reason") or "")
    message = str(payload.get("message") or "")
    code = int(payload.get("code") or status)
    if code == 422:
        details = payload.get("details") or {}
        causes = tuple(
            Cause(str(c.get("field", "")), str(c.get("reason", "")), str(c.get("message", "")))
            for c in details.get("causes") or ()
        )
        return Invalid(code, reason or "Invalid", message, causes)
    cls = _BY_STATUS.get(code)
    if cls is None:
        cls = ServerError if code >= 500 or code < 400 else ApiError
    return cls(code, reason or cls.__name__, message)
