"""Body-based routing on one base URL, the data plane's half: a base-URL request's `model` read from its body
into the header its route matches (`contract.routing` names the paths and the header the builders render).

`body_model` reads the body the same way the rest of the data plane does (`dataplane.body.read_json_object`:
exactly one UTF-8 JSON object, bounded depth, no byte-order mark); it refuses a body it cannot route rather than
guessing: too large, not one object, no `model`, a `model` that is not a string, empty, longer than a
Kubernetes name, or holding a character a header (or CEL) must never carry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from maasctl.contract.routing import BASE_INFERENCE_PATHS, MODEL_HEADER
from maasctl.dataplane.body import InvalidBody, read_json_object

__all__ = [
    "MAX_MODEL_NAME",
    "MAX_ROUTING_BODY",
    "NoModel",
    "body_model",
    "is_base_inference_path",
    "match_headers",
]

MAX_MODEL_NAME: Final = 253  # a Kubernetes object name: what a MaaSModelRef publishes
MAX_ROUTING_BODY: Final = 10 * 1024 * 1024  # the gateway's default request bound: never read more to route
_UNSAFE: Final = re.compile(r"[\x22\x27\x5c\x00-\x1f\x7f-\x9f]")  # quotes, backslash, controls (api._fields)


class NoModel(InvalidBody):
    """A base-URL request whose body names no routable model (answered 400 `model_required`)."""


def is_base_inference_path(path: str) -> bool:
    """True for a base-URL inference path (canonical, without query): routed by the body's `model`."""
    return path in BASE_INFERENCE_PATHS


def body_model(raw: bytes, limit: int = MAX_ROUTING_BODY) -> str:
    """The model a base-URL request names: the body's top-level `model`.

    Raises:
        NoModel: the body has no usable `model` (absent, not a string, empty, too long, unsafe characters).
        InvalidBody: the body is larger than `limit` or not exactly one UTF-8 JSON object.
    """
    if len(raw) > limit:
        raise InvalidBody(f"the body is larger than {limit} bytes")
    stripped = raw.lstrip(b" \t\r\n")
    if stripped[:1] != b"{":
        raise NoModel("requests to the base URL must be a JSON object naming the model in `model`")
    body = read_json_object(stripped)
    model = body.get("model")
    if model is None:
        raise NoModel("requests to the base URL must name the model in `model`")
    if not isinstance(model, str):
        raise NoModel("`model` must be a string")
    if not model or len(model) > MAX_MODEL_NAME or _UNSAFE.search(model) is not None:
        raise NoModel(f"`model` must be 1-{MAX_MODEL_NAME} characters without quotes, backslashes or controls")
    return model


def match_headers(path: str, headers: Mapping[str, str], raw_body: bytes, limit: int = MAX_ROUTING_BODY
                  ) -> Mapping[str, str]:
    """The headers a route is matched with: on a base-URL inference path, `headers` plus `MODEL_HEADER` set to
    the body's `model` (a client-sent one was refused at the edge; whatever it says is replaced); elsewhere
    `headers` as they are (the body is not read). `headers` have lowercase names.

    Raises:
        NoModel, InvalidBody: as `body_model`, on a base-URL path only.
    """
    if not is_base_inference_path(path):
        return headers
    return {**headers, MODEL_HEADER: body_model(raw_body, limit)}
