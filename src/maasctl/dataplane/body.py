"""The request body the backend receives: read once and re-encoded, so counting cannot be switched off by
the client.

`prepare_body`: any JSON object body (whatever the Content-Type) is parsed once and re-serialised, so the
backend receives exactly what the gateway decided (no duplicate keys, no type games). On a route that
publishes a model under its own name (`ModelRename`: an ExternalModel whose `targetModel` differs), `model`
must name the published model (or one of its aliases) — anything else is `ModelMismatch` (404), so a caller
can never reach, or be billed as, another of the provider's models — and is rewritten to the provider's
name; a non-JSON body cannot be rewritten and is refused. A streaming request —
`stream` true, 1, "true", "1", "yes", "on" in any case — is sent with `stream: true` and
`stream_options.include_usage: true`; the usage chunk this adds is hidden from a client that did not ask for
it. JSON nested deeper than `MAX_JSON_DEPTH` is refused (`InvalidBody`, 400). What the gateway forwards
unparsed can never be JSON to a backend — every JSON value is either read or refused: JSON with a byte-order
mark or in UTF-16/32 (which Python's `json.loads`, hence FastAPI and vLLM, still reads) is refused; so is a
body that starts with `{` but is not exactly one valid UTF-8 JSON object (trailing data, invalid UTF-8, an
integer too long to read) or holds an escaped lone surrogate; so is any other JSON value, at any depth and
after any JSON whitespace (an array, a string, a number, `true`/`false`/`null`, NaN), and so is anything a
lenient reader would take a value from the front of (`[` at all, `1 trailing`); and a body whose
Content-Type reads as JSON (`declares_json`: none, `application/json; charset=...`, `+json`, ...) must be
one JSON object. Other bodies (multipart uploads, binary, under a non-JSON Content-Type) pass as they are;
an empty body passes. The completion limit is
the largest of `max_tokens`, `max_completion_tokens` and `max_output_tokens`, read as leniently as pydantic
reads them ("30000", 30000.0).

`bound_completion` holds a request to its model's explicit completion ceiling, so the provider cannot
generate more than the request reserved (docs/data-plane.md, "Reservation bound").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final

from maasctl.contract.usage import COMPLETION_LIMIT_FIELDS, MAX_TOKENS
from maasctl.dataplane.lenient import lenient_int

__all__ = [
    "MAX_JSON_DEPTH",
    "InvalidBody",
    "ModelMismatch",
    "ModelRename",
    "PreparedBody",
    "bound_completion",
    "declares_json",
    "prepare_body",
    "read_json_object",
]

MAX_JSON_DEPTH: Final = 128
_UTF8_ONLY: Final = "request bodies must be UTF-8 JSON without a byte-order mark"
_JSON_STARTS: Final = frozenset('{["-0123456789tfnNI')  # what a JSON value (Python's NaN, Infinity too) starts with
_JSON_WHITESPACE: Final = b" \t\r\n"
_LIMIT_FIELDS: Final = COMPLETION_LIMIT_FIELDS
_CHOICE_FIELDS: Final = ("n", "best_of")
_TRUE_TEXT: Final = frozenset({"true", "1", "yes", "on"})


class InvalidBody(ValueError):
    """A request body the gateway refuses to interpret (answered 400)."""


class ModelMismatch(InvalidBody):
    """The body names another model than the route serves (answered 404 `model_not_found`)."""


@dataclass(frozen=True)
class ModelRename:
    """The model a route serves: clients call it `published` (or one of `aliases`), the provider `target`."""

    published: str
    target: str
    aliases: tuple[str, ...] = ()

    @property
    def accepted(self) -> frozenset[str]:
        return frozenset((self.published, self.target, *self.aliases))

    @property
    def renamed(self) -> bool:
        return self.published != self.target


@dataclass(frozen=True)
class PreparedBody:
    """The body that goes upstream and what counting needs to know about it. `model` is the name the client
    used (the published one on a renamed route); `response_model`, when set, replaces the provider's model
    name in the answer."""

    content: bytes
    streaming: bool = False
    injected_usage: bool = False  # include_usage was added by the gateway: hide the usage chunk
    model: str | None = None
    max_tokens: int | None = None
    prompt_estimate: int = 0
    response_model: str | None = None
    choices: int = 1  # completions the request asks for (`n`, `best_of`): the estimate's limit counts each


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_TEXT
    return False


def _max_tokens(body: dict[str, Any]) -> int | None:
    """The largest completion limit any limit field allows: backends coerce numeric strings and whole floats
    and differ in which field they prefer, so the estimate's ceiling must cover every reading."""
    largest = 0
    for field in _LIMIT_FIELDS:
        value = body.get(field)
        if value is not None:
            largest = max(largest, (value if type(value) is int else lenient_int(value)) or 0)
    return min(largest, MAX_TOKENS) if largest > 0 else None


def _too_deep(raw: bytes, limit: int) -> bool:
    """True when JSON `raw` nests objects/arrays deeper than `limit` (strings respected). Cheap for ordinary
    bodies: only a body with more than `limit` brackets at all is walked."""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for c in raw:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x7B, 0x5B):
            depth += 1
            if depth > limit:
                return True
        elif c in (0x7D, 0x5D):
            depth -= 1
    return False


def _foreign_json(raw: bytes) -> bool:
    """True for JSON that is not plain UTF-8 text (a byte-order mark, UTF-16, UTF-32): Python's `json.loads`
    (FastAPI, vLLM) sniffs the encoding and reads it, so forwarding it unread would serve it uncounted."""
    if raw[:1] == b"{" and raw[1:2] != b"\x00":  # the usual body: UTF-8 by the same rule detect_encoding applies
        return False
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8":
        return False
    head = raw[:64].decode(encoding, "replace").lstrip(" \t\r\n\ufeff")[:1]
    if head in ("{", "["):
        return True
    if head not in _JSON_STARTS:  # binary bodies: no need to decode all of them
        return False
    try:
        json.loads(raw)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True


def read_json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object of a body that starts with `{` (or any JSON the edge reads, e.g. `/_gateway/simulate`'s).
    Anything but exactly one valid UTF-8 JSON object nested at most `MAX_JSON_DEPTH` deep is refused
    (InvalidBody, never RecursionError): a lenient backend may still read it (skipping trailing data, decoding
    another charset), and the gateway would forward what it never read."""
    if _too_deep(raw, MAX_JSON_DEPTH):
        raise InvalidBody(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidBody(f"{_UTF8_ONLY}: invalid UTF-8 at byte {exc.start}") from exc
    except RecursionError as exc:
        raise InvalidBody("the JSON body is nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise InvalidBody(f"the body is not one valid JSON object: {exc.msg} at character {exc.pos}") from exc
    except ValueError as exc:  # e.g. an integer longer than Python converts
        raise InvalidBody("the body is not one valid JSON object: a number is too long") from exc
    if not isinstance(body, dict):
        raise InvalidBody("the body is not one valid JSON object")
    return body


def _encode(body: dict[str, Any]) -> bytes:
    """`body` as the compact UTF-8 JSON the backend receives; an escaped lone surrogate has no UTF-8 form."""
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise InvalidBody("the JSON body contains an unpaired surrogate escape (\\ud800-\\udfff)") from exc


def _not_rewritable(raw: bytes, rename: ModelRename | None, estimate: int) -> PreparedBody:
    if rename is not None and rename.renamed and raw.strip():
        raise InvalidBody(f"model {rename.published!r} is served under another name upstream: send a JSON object")
    return PreparedBody(raw, prompt_estimate=estimate)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)[:64]
    return repr(text[:64] + ("..." if len(text) > 64 else ""))


def declares_json(content_type: str | None) -> bool:
    """True when a backend may read the body as JSON by its Content-Type: none at all (FastAPI, hence vLLM,
    reads a body without one as JSON), an empty one, or any media type naming JSON (`application/json` with
    any parameters, `application/vnd.x+json`, `text/json`, `application/x-json`, in any case)."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return not media or "json" in media


def _starts_json_value(raw: bytes) -> bool:
    """True when `raw`, after JSON whitespace, begins with a JSON value (Python's NaN and Infinity included):
    a lenient reader (one that takes the first value and ignores the rest) would take it. `[` always counts."""
    text = raw.lstrip(_JSON_WHITESPACE)
    head = text[:1].decode("latin-1")
    if head == "[":
        return True
    if not head or head not in _JSON_STARTS:
        return False
    try:
        json.JSONDecoder().raw_decode(text.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    return True


def prepare_body(raw: bytes, rename: ModelRename | None = None, *, content_type: str | None = None) -> PreparedBody:
    """Normalise an OpenAI-style request (see the module docstring). `content_type` is the request's
    Content-Type header (None: absent). Raises InvalidBody (ModelMismatch) and nothing else, whatever the
    bytes."""
    estimate = max(1, len(raw) // 4)
    if _foreign_json(raw):
        raise InvalidBody(_UTF8_ONLY)
    stripped = raw.lstrip(_JSON_WHITESPACE)
    if not stripped:  # nothing to read (GET /v1/models and friends)
        return _not_rewritable(raw, rename, estimate)
    if stripped[:1] != b"{":
        if _starts_json_value(stripped):
            raise InvalidBody("the body is JSON but not a JSON object (an array, string, number, true, false or "
                              "null is never forwarded)")
        if declares_json(content_type):
            declared = f"the Content-Type {content_type!r}" if content_type else "a body without a Content-Type"
            raise InvalidBody(f"{declared} reads as JSON: the body must be one JSON object")
        return _not_rewritable(raw, rename, estimate)
    body = read_json_object(raw)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    response_model = None
    if rename is not None:
        sent = body.get("model")
        if "model" in body and not (isinstance(sent, str) and sent in rename.accepted):
            raise ModelMismatch(f"model {_short(body['model'])} is not served here; this route serves "
                                f"{rename.published!r}")
        body["model"] = rename.target
        model = rename.published
        response_model = rename.published if rename.renamed else None
    max_tokens = _max_tokens(body)
    streaming = _truthy(body.get("stream"))
    injected = False
    if "stream" in body:
        body["stream"] = streaming
    if streaming:
        options = body.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        injected = not asked
    content = _encode(body)
    return PreparedBody(content, streaming, injected, model, max_tokens, estimate, response_model, _choices(body))


def _choices(body: dict[str, Any]) -> int:
    """How many completions the backend may generate: the largest of `n` and `best_of` (read as leniently as
    the limit fields), at least 1."""
    asked = [n for n in (lenient_int(body.get(field)) for field in _CHOICE_FIELDS) if n is not None]
    return max([1, *asked])


def _bound_field(path: str) -> str | None:
    """The field a backend reads the completion bound from on `path` (None: the API generates no completion)."""
    if path.endswith("/responses"):
        return "max_output_tokens"
    if path.endswith(("/chat/completions", "/completions")):
        return "max_tokens"
    return None


def bound_completion(body: PreparedBody, model_ceiling: int | None, path: str) -> PreparedBody:
    """The request as sent upstream when its model sets an explicit completion ceiling: a client that stated
    no bound gets `max_tokens: <ceiling>` (`max_output_tokens` on `/responses`), and a stated bound above the
    ceiling is lowered to it, so the provider cannot generate more than the request reserved
    (`request_bound`). `model_ceiling` None (the model relies on the default) keeps the body byte for byte;
    so do non-JSON bodies and paths without a completion (embeddings). `path` is the upstream path.
    A stated bound that is no number is left for the backend to refuse."""
    if model_ceiling is None:  # most models: nothing to bound, and nothing to look at
        return body
    field = _bound_field(path.split("?", 1)[0])
    if field is None or body.content[:1] != b"{":
        return body
    fields = json.loads(body.content)  # our own encoding of a JSON object (prepare_body)
    stated = [f for f in COMPLETION_LIMIT_FIELDS if fields.get(f) is not None]
    if not stated:
        fields[field] = model_ceiling
    for name in stated:
        value = lenient_int(fields[name])
        if value is not None and value > model_ceiling:
            fields[name] = model_ceiling
    return replace(body, content=_encode(fields), max_tokens=_max_tokens(fields))
