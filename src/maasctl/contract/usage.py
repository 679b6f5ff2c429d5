"""How a request is counted: the request the backend receives, how usage is read from the answer, what is
charged when it cannot be read, and the usage record every process shares (gateway -> maas-api -> billing).

Counting cannot be switched off by the client:
- `prepare_body`: any JSON object body (whatever the Content-Type) is parsed once and re-serialised, so the
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
- The gateway asks upstream for `Accept-Encoding: identity` and decompresses gzip/deflate answers it must scan
  (`Decompressor`), every byte of them; an encoding it cannot read, invalid data or a chunk that would inflate
  beyond `DECOMPRESS_LIMIT` (a bomb) is counted as unreadable — never scanned short.
- `JsonUsageScanner` reads `usage` from a JSON answer of any size with bounded memory: the whole body when it
  is small, else the last `TAIL_BYTES` (where OpenAI-compatible servers put `usage`). `SseUsageFilter` takes the
  last `usage` of an event stream, event by event.
- Answers of a renamed model name the published model, not the provider's: `SseUsageFilter(rename_to=...)`
  rewrites each event's top-level `model`, `JsonModelRewriter` a JSON answer's (up to a size bound).
- When usage cannot be read from a served (2xx) answer — the backend omitted it, the stream was cut, the client
  went away — `charge_for` returns a conservative estimate: the prompt estimate (request bytes / 4) plus the
  request's completion limit (else the configured completion ceiling) for each completion it asks for (`n`,
  `best_of`). Never 0 or 1; the record says it was estimated and why. Usage naming neither input tokens nor a
  total (output tokens only, as an Anthropic-style `message_delta`) is charged the prompt at its estimate.
  Usage with a malformed count (a string, float, negative, null, bool) is unreadable too: charged the larger of
  the estimate and what could be read.

The usage record (`UsageRecord`) carries who (user, key id, subscription, organization id, cost center, the
subscription's labels), what (model, route), how much (tokens of every kind, the tokens charged to the
counters, whether they were estimated) and how it ended (status, `termination`); never credentials or content.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from maasctl.api.modelref import MAX_COMPLETION_TOKENS

__all__ = [
    "COMPLETION_LIMIT_FIELDS",
    "DECOMPRESS_LIMIT",
    "DEFAULT_COMPLETION_CEILING",
    "MAX_COMPLETION_CEILING",
    "MAX_JSON_DEPTH",
    "MAX_TOKENS",
    "TAIL_BYTES",
    "Charge",
    "Decompressor",
    "InvalidBody",
    "JsonModelRewriter",
    "JsonUsageScanner",
    "ModelMismatch",
    "ModelRename",
    "PreparedBody",
    "SseUsageFilter",
    "Termination",
    "UsageRecord",
    "bound_completion",
    "charge_for",
    "completion_ceiling",
    "declares_json",
    "prepare_body",
    "read_json_object",
    "rename_top_level_model",
    "replace_spans",
    "request_bound",
    "set_top_level_model",
    "usage_numbers",
]

MAX_TOKENS: Final = 10**12  # per request; far above any model's context, far below BIGINT
TAIL_BYTES: Final = 64 * 1024
DEFAULT_COMPLETION_CEILING: Final = 4096
"""The completion tokens a request reserves (and is charged when usage is unreadable) when it states no bound
and its model sets no `maxCompletionTokens`."""
MAX_COMPLETION_CEILING: Final = MAX_COMPLETION_TOKENS  # the largest `MaaSModelRef.spec.maxCompletionTokens`
MAX_JSON_DEPTH: Final = 128
DECOMPRESS_LIMIT: Final = 16 * 1024 * 1024  # per `Decompressor.feed`: a whole realistic answer, not a bomb
_UTF8_ONLY: Final = "request bodies must be UTF-8 JSON without a byte-order mark"
_JSON_STARTS: Final = frozenset('{["-0123456789tfnNI')  # what a JSON value (Python's NaN, Infinity too) starts with
_JSON_WHITESPACE: Final = b" \t\r\n"
COMPLETION_LIMIT_FIELDS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""The fields in which a client states its completion bound (chat, legacy/completions, responses)."""
_LIMIT_FIELDS: Final = COMPLETION_LIMIT_FIELDS
_CHOICE_FIELDS: Final = ("n", "best_of")
_INPUT_NAMES: Final = ("prompt_tokens", "input_tokens")
_COUNT_NAMES: Final = {"input_tokens": _INPUT_NAMES,
                       "output_tokens": ("completion_tokens", "output_tokens"),
                       "total_tokens": ("total_tokens",)}
_TRUE_TEXT: Final = frozenset({"true", "1", "yes", "on"})
_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
_SEPARATORS: Final = (b"\n\n", b"\r\n\r\n", b"\r\r")

Termination = Literal["complete", "client_disconnect", "upstream_error", "truncated", "refused"]


# --- the request ---------------------------------------------------------------------------------------


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


def _lenient_int(value: Any) -> int | None:
    """`value` as a whole number the way a lax reader (pydantic: "30000", 30000.0) may take it, rounded up and
    capped at MAX_TOKENS; None when it is no number (bools included). Only for readings where more is safer."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return min(value, MAX_TOKENS)
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return MAX_TOKENS if number == math.inf else None
    return min(math.ceil(number), MAX_TOKENS)


def _max_tokens(body: dict[str, Any]) -> int | None:
    """The largest completion limit any limit field allows: backends coerce numeric strings and whole floats
    and differ in which field they prefer, so the estimate's ceiling must cover every reading."""
    largest = 0
    for field in _LIMIT_FIELDS:
        value = body.get(field)
        if value is not None:
            largest = max(largest, (value if type(value) is int else _lenient_int(value)) or 0)
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
    asked = [n for n in (_lenient_int(body.get(field)) for field in _CHOICE_FIELDS) if n is not None]
    return max([1, *asked])


# --- the answer ----------------------------------------------------------------------------------------


class Decompressor:
    """Undo a response's Content-Encoding for scanning (the client still gets the bytes as sent). Every byte
    comes out (gzip members that follow each other included) until `readable` turns False: for encodings the
    gateway cannot decode, invalid data, or a chunk that would yield more than `limit` bytes (a decompression
    bomb) — their usage counts as unreadable (the estimate applies), never as read from a shortened answer."""

    def __init__(self, encoding: str, limit: int = DECOMPRESS_LIMIT) -> None:
        enc = encoding.strip().lower()
        self._z: Any = None
        self._gzip = enc in ("gzip", "x-gzip")
        self._limit = limit
        self.readable = True
        self.identity = enc in ("", "identity")
        if self.identity:
            return
        if self._gzip:
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._z = zlib.decompressobj()
        else:
            self.readable = False

    def feed(self, chunk: bytes) -> bytes:
        """All the decompressed bytes of `chunk`, or b"" once unreadable (never a silently shortened part)."""
        if not self.readable:
            return b""
        if self._z is None:
            return chunk
        try:
            out = self._inflate(chunk)
        except zlib.error:
            out = None
        if out is None:
            self.readable, self._z = False, None
            return b""
        return out

    def _inflate(self, data: bytes) -> bytes | None:
        """`data` decompressed, or None when that is more than `limit` bytes or data follows a deflate stream's
        end. Asks zlib for one byte over the limit: output below it means the input was used up."""
        parts: list[bytes] = []
        room = self._limit
        while data:
            piece = self._z.decompress(data, room + 1)
            room -= len(piece)
            if room < 0 or self._z.unconsumed_tail:
                return None
            parts.append(piece)
            data = self._z.unused_data if self._z.eof else b""
            if data and not self._gzip:
                return None
            if data:  # the next gzip member (RFC 1952)
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return b"".join(parts)


class SseUsageFilter:
    """Splits an SSE byte stream into events, remembers the last `usage`, drops the injected usage chunk and,
    with `rename_to`, writes that name into each event's top-level `model`. An event larger than 4 MiB is
    passed through unparsed (its usage, if any, is then unreadable)."""

    def __init__(self, drop_usage_chunk: bool, rename_to: str | None = None) -> None:
        self._drop = drop_usage_chunk
        self._rename = rename_to
        self._buffer = b""
        self.usage: Any = None
        self.done = False  # saw `data: [DONE]`

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward now (complete events only). Linear in the chunk's size: a decompressed chunk may hold
        thousands of events."""
        self._buffer += chunk
        out: list[bytes] = []
        start = 0
        found = {sep: -2 for sep in _SEPARATORS}  # next position of each separator; -2: not searched yet
        while True:
            cut, sep = self._boundary(start, found)
            if cut < 0:
                break
            kept = self._process(self._buffer[start: cut + sep])
            start = cut + sep
            if kept:
                out.append(kept)
        self._buffer = self._buffer[start:]
        if len(self._buffer) > _MAX_EVENT_BYTES:
            out.append(self._buffer)
            self._buffer = b""
        return b"".join(out)

    def close(self) -> bytes:
        """Whatever is left (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return self._process(rest) if rest else b""

    def _boundary(self, start: int, found: dict[bytes, int]) -> tuple[int, int]:
        """The first event end at or after `start`: (position, separator length), (-1, 0) when none. `found`
        remembers each separator's next position, so each is searched for once per buffer position."""
        for sep, at in found.items():
            if at == -2 or 0 <= at < start:
                found[sep] = self._buffer.find(sep, start)
        candidates = [(at, len(sep)) for sep, at in found.items() if at >= 0]
        return min(candidates) if candidates else (-1, 0)

    def _process(self, event: bytes) -> bytes:
        """The event to forward (b"" to drop it)."""
        data = b"".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
        if data.strip() == b"[DONE]":
            self.done = True
            return event
        renaming = self._rename is not None and b'"model"' in data
        if not data or (b'"usage"' not in data and not renaming):
            return event
        try:
            chunk = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return event
        if not isinstance(chunk, dict):
            return event
        if chunk.get("usage"):
            self.usage = chunk["usage"]
            if self._drop and not chunk.get("choices"):
                return b""
        new = self._rename
        if new is not None and isinstance(chunk.get("model"), str) and chunk["model"] != new:
            lines = event.splitlines(keepends=True)
            data_lines = [i for i, line in enumerate(lines) if line.startswith(b"data:")]
            if len(data_lines) == 1:
                edited = rename_top_level_model(lines[data_lines[0]], chunk, new)
                if edited is not None:
                    lines[data_lines[0]] = edited
                    return b"".join(lines)
            chunk["model"] = new
            return _with_data(event, json.dumps(chunk, ensure_ascii=False).encode())
        return event


_JSON_TOKEN: Final = re.compile(rb'("[^"\\]*(?:\\.[^"\\]*)*)(")?|([\[\]{}])', re.S)
"""A JSON string (group 1; group 2 is None when it is cut off) or a bracket (group 3): all that
`set_top_level_model` needs to see, found by the regex engine instead of a Python loop over every byte (a
position that starts neither fails at its first byte, so a scan stays linear)."""
_COLON: Final = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*")
_PLAIN_KEY: Final = re.compile(rb'"[ !#-\[\]-~]*"')
"""A key of printable ASCII without escapes: its text is its bytes."""


def set_top_level_model(data: bytes, name: str) -> bytes | None:
    """`data` (one JSON object, possibly after an SSE `data:` prefix) with every top-level `"model"` string
    value replaced by `name` and every other byte kept; None when it has none or is not well formed."""
    spans: list[tuple[int, int]] = []
    depth = 0
    value_at = -1  # where a top-level "model" key's string value starts
    for token in _JSON_TOKEN.finditer(data):
        if token.start(3) >= 0:
            depth += 1 if data[token.start(3)] in b"{[" else -1
            continue
        start = token.start(1)
        if token.start(2) < 0:
            return None  # a string cut off
        end = token.end(2)
        if start == value_at:
            spans.append((start, end))
            continue
        if depth != 1:
            continue
        colon = _COLON.match(data, end)
        if colon is None:
            continue
        if _PLAIN_KEY.fullmatch(data, start, end):  # nothing to decode (the usual case)
            key: Any = data[start + 1:end - 1].decode("ascii")
        else:
            try:
                key = json.loads(data[start:end])
            except (ValueError, UnicodeDecodeError):
                return None
        if key == "model" and data[colon.end():colon.end() + 1] == b'"':
            value_at = colon.end()
    return replace_spans(data, spans, json.dumps(name, ensure_ascii=False).encode()) if spans else None


def rename_top_level_model(data: bytes, parsed: Mapping[str, Any], name: str) -> bytes | None:
    """`set_top_level_model(data, name)` for a `data` already parsed as `parsed`, cheaply in the usual case: an
    answer whose only `"model"` is the top-level key gets its value replaced in place; anything else (a nested
    or duplicated `"model"`, an escaped key, a value spelled differently) takes the full scan.

    Why the in-place edit is right without parsing again: `data` is valid JSON (it parsed), so an unescaped
    `"model"` followed by a colon is a key; without a `\\u` escape anywhere a key that decodes to `model` can
    only be spelled `"model"`, so when that spelling occurs once it is the top-level key `parsed` has. With a
    `\\u` in `data` (a key may be spelled `"mod\\u0065l"`) the edit is kept only if it parses as expected."""
    fast = _rename_unique_model(data, parsed, name)
    return fast if fast is not None else set_top_level_model(data, name)


def _rename_unique_model(data: bytes, parsed: Mapping[str, Any], name: str) -> bytes | None:
    at = data.find(b'"model"')
    if at < 1 or data.find(b'"model"', at + 1) >= 0 or data[at - 1:at] == b"\\":
        return None
    colon = _COLON.match(data, at + 7)
    old = parsed.get("model")
    if colon is None or not isinstance(old, str):
        return None
    spelled = json.dumps(old, ensure_ascii=False).encode()
    if not data.startswith(spelled, colon.end()):
        spelled = json.dumps(old).encode()  # a provider that escapes non-ASCII
        if not data.startswith(spelled, colon.end()):
            return None
    edited = data[:colon.end()] + json.dumps(name, ensure_ascii=False).encode() + data[colon.end() + len(spelled):]
    if b"\\u" not in data:
        return edited
    try:
        if json.loads(edited[data.find(b"{"):]) != {**parsed, "model": name}:
            return None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return edited


def replace_spans(data: bytes, spans: list[tuple[int, int]], replacement: bytes) -> bytes:
    """`data` with each (start, end) span, in order and not overlapping, replaced by `replacement`."""
    out, last = [], 0
    for start, end in spans:
        out += [data[last:start], replacement]
        last = end
    out.append(data[last:])
    return b"".join(out)


def _with_data(event: bytes, data: bytes) -> bytes:
    """`event` with its data lines replaced by one `data:` line (other fields and the separator kept)."""
    body = event.rstrip(b"\r\n")
    separator = event[len(body):] or b"\n\n"
    newline = b"\r\n" if b"\r\n" in separator else b"\n"
    lines = [line for line in body.splitlines() if not line.startswith(b"data:")]
    return newline.join([*lines, b"data: " + data]) + separator


class JsonModelRewriter:
    """A JSON answer with its top-level `model` replaced by `rename_to`. Holds at most `limit` bytes: a larger
    answer is passed on as received (and keeps the provider's name). After `close`, `answer` is the answer as
    parsed when it was a JSON object with a string `model` (its `usage` need not be parsed again)."""

    def __init__(self, rename_to: str, limit: int) -> None:
        self.answer: dict[str, Any] | None = None
        self._rename = rename_to
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._passing = False

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward now (nothing until the whole answer is known, unless it is too large)."""
        if self._passing:
            return chunk
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size > self._limit:
            self._passing = True
            held, self._parts = b"".join(self._parts), []
            return held
        return b""

    def close(self) -> bytes:
        """The (rewritten) answer, or what is still held."""
        held, self._parts = b"".join(self._parts), []
        if self._passing or not held:
            return held
        try:
            answer = json.loads(held)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return held
        if not isinstance(answer, dict) or not isinstance(answer.get("model"), str):
            return held
        self.answer = answer
        edited = rename_top_level_model(held, answer, self._rename)
        if edited is not None:
            return edited
        return json.dumps({**answer, "model": self._rename}, ensure_ascii=False).encode()


def _object_at(data: bytes, start: int) -> Any:
    """The JSON object that starts at `data[start]` (`{`), or None when it is cut off."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(data)):
        c = data[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                try:
                    return json.loads(data[start: i + 1])
                except (ValueError, UnicodeDecodeError, RecursionError):
                    return None
    return None


class JsonUsageScanner:
    """Reads `usage` from a JSON answer of any size with at most `limit` + `TAIL_BYTES` bytes kept."""

    def __init__(self, limit: int) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = limit
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= self._limit:
            self._parts.append(chunk)
        elif self._parts:
            self._tail = (b"".join(self._parts) + chunk)[-TAIL_BYTES:]
            self._parts = []
        else:
            self._tail = (self._tail + chunk)[-TAIL_BYTES:]

    @property
    def usage(self) -> Any:
        if self._parts:
            try:
                body = json.loads(b"".join(self._parts))
            except (ValueError, UnicodeDecodeError, RecursionError):
                return None
            return body.get("usage") if isinstance(body, dict) else None
        at = self._tail.rfind(b'"usage"')
        if at < 0:
            return None
        brace = self._tail.find(b"{", at)
        colon = self._tail.find(b":", at)
        if brace < 0 or colon < 0 or self._tail[colon + 1: brace].strip():
            return None
        return _object_at(self._tail, brace)


def _int(value: Any) -> int:
    return min(value, MAX_TOKENS) if _well_formed(value) else 0


def _well_formed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_usage(usage: Any) -> tuple[dict[str, int], list[str]]:
    """Token counts of an OpenAI `usage` object ({} when it is no object) and the names of the charged counts
    that are present but not non-negative ints. Each count is the largest its names (`prompt_tokens` or
    `input_tokens`, ...) give, read leniently, so a null or a smaller alias never hides a larger number. The
    details (cached, reasoning) only inform the record: malformed ones read as 0."""
    if not isinstance(usage, dict):
        return {}, []
    out: dict[str, int] = {}
    malformed: list[str] = []
    for count, names in _COUNT_NAMES.items():
        best = 0
        for name in names:
            if name not in usage:
                continue
            value = usage[name]
            if type(value) is int and value >= 0:  # the usual case (bool is not int here)
                best = max(best, value)
            else:
                malformed.append(name)
                best = max(best, _lenient_int(value) or 0)
        out[count] = min(best, MAX_TOKENS)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    out["cached_tokens"] = _int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    out["reasoning_tokens"] = (
        _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0)
    out["total_tokens"] = min(max(out["total_tokens"], out["input_tokens"] + out["output_tokens"]), MAX_TOKENS)
    return out, malformed


def _without_input(usage: Any) -> bool:
    """Usage that names neither input tokens nor a total: the prompt went uncounted, not "0 tokens"."""
    return isinstance(usage, dict) and not any(name in usage for name in (*_INPUT_NAMES, "total_tokens"))


def usage_numbers(usage: Any) -> dict[str, int]:
    """Token counts of an OpenAI `usage` object ({} when absent; see `_read_usage`). The total is never less
    than input + output."""
    return _read_usage(usage)[0]


@dataclass(frozen=True)
class Charge:
    """What one finished request costs the rate-limit counters, and what the record says about it."""

    numbers: dict[str, int]
    charged: int
    estimated: bool = False
    estimate_reason: str = ""


def request_bound(body: PreparedBody, completion_ceiling: int = DEFAULT_COMPLETION_CEILING) -> int:
    """The most a request can use as far as the gateway knows before the answer: the prompt estimate plus its
    completion limit (else `completion_ceiling`) for each completion it asks for. What a token limit reserves
    and what an unreadable answer is charged."""
    completion = (body.max_tokens or completion_ceiling) * body.choices
    return min(body.prompt_estimate + completion, MAX_TOKENS)


def completion_ceiling(model_ceiling: int | None, default: int = DEFAULT_COMPLETION_CEILING) -> int:
    """The completion bound of a request that states none: the model's `maxCompletionTokens`, else `default`."""
    return model_ceiling if model_ceiling is not None else default


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
        value = _lenient_int(fields[name])
        if value is not None and value > model_ceiling:
            fields[name] = model_ceiling
    return replace(body, content=_encode(fields), max_tokens=_max_tokens(fields))


def charge_for(status: int, usage: Any, body: PreparedBody, termination: str, *,
               completion_ceiling: int = DEFAULT_COMPLETION_CEILING) -> Charge:
    """The tokens to charge for a request (see the module docstring for the estimate). Usage with a malformed
    count is unreadable: a served answer is charged the larger of the estimate and what could be read."""
    numbers, malformed = _read_usage(usage)
    read = numbers.get("total_tokens", 0)
    if read > 0 and not malformed:
        if _without_input(usage):  # e.g. an Anthropic-style `message_delta`: output tokens only
            numbers = {**numbers, "input_tokens": body.prompt_estimate, "total_tokens": read + body.prompt_estimate}
            return Charge(numbers, numbers["total_tokens"], True, "usage without input tokens")
        return Charge(numbers, read)
    if not 200 <= status < 300:
        return Charge(numbers, read)
    estimate = max(2, request_bound(body, completion_ceiling))
    if malformed:
        reason = f"usage malformed in the answer ({', '.join(malformed)})"
    elif termination == "complete":
        reason = "usage missing from the answer"
    else:
        reason = f"usage unreadable ({termination})"
    return Charge(numbers, max(estimate, read), True, reason)


# --- the record ----------------------------------------------------------------------------------------

Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS, strict=True)]
Name = Annotated[str, StringConstraints(max_length=253)]
Ref = Annotated[str, StringConstraints(max_length=317)]


class UsageRecord(BaseModel):
    """One request as the gateway reports it (snake_case on the wire). `request_id` is the idempotency key;
    `timestamp` is Unix seconds. Validated the same way where it is produced and where it is ingested."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")] = Field(
        validation_alias=AliasChoices("request_id", "id"))
    timestamp: AwareDatetime | float
    user: Name = ""
    key_id: Annotated[str, StringConstraints(max_length=64)] = ""
    subscription: Ref = ""
    organization: Name = Field(default="", validation_alias=AliasChoices("organization", "organization_id"))
    cost_center: Name = ""
    labels: Annotated[dict[Annotated[str, StringConstraints(max_length=317)], Name], Field(max_length=64)] = Field(
        default_factory=dict)
    model: Ref = ""
    route: Ref = ""
    status: Annotated[int, Field(ge=0, le=999, strict=True)]
    latency_ms: Annotated[float, Field(ge=0, le=86_400_000)] = 0.0
    streamed: bool = False
    input_tokens: Tokens = 0
    cached_tokens: Tokens = 0
    output_tokens: Tokens = 0
    reasoning_tokens: Tokens = 0
    total_tokens: Tokens = 0
    charged_tokens: Tokens = 0
    estimated: bool = False
    estimate_reason: Annotated[str, StringConstraints(max_length=256)] = ""
    termination: Termination = "complete"
    # Guardrails (docs/guardrails.md): "" (not guarded), passed, blocked_input, blocked_output, fail_open
    # (the engine failed and FailOpen let the request through), unavailable (refused: engine or config down).
    guardrails: Annotated[str, StringConstraints(max_length=32)] = ""

    @field_validator("timestamp")
    @classmethod
    def _sane_time(cls, value: datetime | float) -> datetime | float:
        if isinstance(value, float | int) and not 0 < value < 32_503_680_000:  # before year 3000
            raise ValueError("timestamp must be Unix seconds")
        return value

    @property
    def time(self) -> datetime:
        ts = self.timestamp
        return ts.astimezone(UTC) if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
