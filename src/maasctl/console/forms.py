"""Errors next to the field they are about: from the API types (the same pydantic models the CRDs are
generated from, so the same rules and messages as the API server's) and from the API server itself
(`Status.details.causes[].field`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import ValidationError

from maasctl.console.kube import KubeError

FORM = "_form"  # errors about the whole form


def pydantic_errors(exc: ValidationError, field_of: Callable[[tuple[str | int, ...]], str]) -> dict[str, str]:
    """{form field: message} from a ValidationError; `field_of` maps an error location to a form field."""
    out: dict[str, str] = {}
    for err in exc.errors():
        loc = tuple(err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        out.setdefault(field_of(loc), message)
    return out


def kube_errors(exc: KubeError, fields: Mapping[str, str], default: str = FORM) -> dict[str, str]:
    """{form field: message} from an API server refusal. `fields` maps an API field path prefix (as the API
    server names it, e.g. `spec.endpoint`, `metadata.name`) to a form field; the longest prefix wins."""
    out: dict[str, str] = {}
    for path, message in exc.causes:
        match = max((p for p in fields if path == p or path.startswith(p + ".") or path.startswith(p + "[")),
                    key=len, default=None)
        field = fields[match] if match is not None else default
        text = f"{path}: {message}" if match is None and path else message
        out[field] = f"{out[field]} {text}" if field in out else text
    if not out:
        field = fields.get("metadata.name", default) if exc.reason == "AlreadyExists" else default
        out[field] = exc.message
    return out


def join(*parts: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in parts:
        for key, value in part.items():
            out.setdefault(key, value)
    return out
