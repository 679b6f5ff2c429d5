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
  it. JSON nested deeper than `MAX_JSON_DEPTH` is refused (`InvalidBody`, 400).
- The gateway asks upstream for `Accept-Encoding: identity` and decompresses gzip/deflate answers it must scan
  (`Decompressor`); an encoding it cannot read is counted as unreadable.
- `JsonUsageScanner` reads `usage` from a JSON answer of any size with bounded memory: the whole body when it
  is small, else the last `TAIL_BYTES` (where OpenAI-compatible servers put `usage`). `SseUsageFilter` takes the
  last `usage` of an event stream, event by event.
- Answers of a renamed model name the published model, not the provider's: `SseUsageFilter(rename_to=...)`
  rewrites each event's top-level `model`, `JsonModelRewriter` a JSON answer's (up to a size bound).
- When usage cannot be read from a served (2xx) answer — the backend omitted it, the stream was cut, the client
  went away — `charge_for` returns a conservative estimate: the prompt estimate (request bytes / 4) plus the
  request's `max_tokens` (or `max_completion_tokens`), else the configured completion ceiling. Never 0 or 1; the
  record says it was estimated and why.

The usage record (`UsageRecord`) carries who (user, key id, subscription, organization id, cost center, the
subscription's labels), what (model, route), how much (tokens of every kind, the tokens charged to the
counters, whether they were estimated) and how it ended (status, `termination`); never credentials or content.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

__all__ = [
    "DEFAULT_COMPLETION_CEILING",
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
    "charge_for",
    "prepare_body",
    "replace_spans",
    "set_top_level_model",
    "usage_numbers",
]

MAX_TOKENS: Final = 10**12  # per request; far above any model's context, far below BIGINT
TAIL_BYTES: Final = 64 * 1024
DEFAULT_COMPLETION_CEILING: Final = 4096
MAX_JSON_DEPTH: Final = 128
_TRUE_TEXT: Final = frozenset({"true", "1", "yes", "on"})
_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024

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


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_TEXT
    return False


def _max_tokens(body: dict[str, Any]) -> int | None:
    for field in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, MAX_TOKENS)
    return None


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


def _not_rewritable(raw: bytes, rename: ModelRename | None, estimate: int) -> PreparedBody:
    if rename is not None and rename.renamed and raw.strip():
        raise InvalidBody(f"model {rename.published!r} is served under another name upstream: send a JSON object")
    return PreparedBody(raw, prompt_estimate=estimate)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)[:64]
    return repr(text[:64] + ("..." if len(text) > 64 else ""))


def prepare_body(raw: bytes, rename: ModelRename | None = None) -> PreparedBody:
    """Normalise an OpenAI-style request (see the module docstring). Raises InvalidBody (ModelMismatch)."""
    estimate = max(1, len(raw) // 4)
    if raw.lstrip()[:1] != b"{":
        return _not_rewritable(raw, rename, estimate)
    if _too_deep(raw, MAX_JSON_DEPTH):
        raise InvalidBody(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise InvalidBody("the JSON body is nested too deeply") from exc
    except (ValueError, UnicodeDecodeError):
        return _not_rewritable(raw, rename, estimate)
    if not isinstance(body, dict):
        return _not_rewritable(raw, rename, estimate)
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
    content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return PreparedBody(content, streaming, injected, model, max_tokens, estimate, response_model)


# --- the answer ----------------------------------------------------------------------------------------


class Decompressor:
    """Undo a response's Content-Encoding for scanning (the client still gets the bytes as sent).
    `readable` is False for encodings the gateway cannot decode (their usage counts as unreadable)."""

    def __init__(self, encoding: str) -> None:
        enc = encoding.strip().lower()
        self._z: Any = None
        self.readable = True
        self.identity = enc in ("", "identity")
        if self.identity:
            return
        if enc in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._z = zlib.decompressobj()
        else:
            self.readable = False

    def feed(self, chunk: bytes) -> bytes:
        if not self.readable:
            return b""
        if self._z is None:
            return chunk
        try:
            return bytes(self._z.decompress(chunk, 8 * len(chunk) + 65536))
        except zlib.error:
            self.readable = False
            return b""


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
        """Bytes to forward now (complete events only)."""
        self._buffer += chunk
        out: list[bytes] = []
        while True:
            cut, sep = self._boundary()
            if cut < 0:
                break
            event = self._buffer[: cut + sep]
            self._buffer = self._buffer[cut + sep:]
            kept = self._process(event)
            if kept:
                out.append(kept)
        if len(self._buffer) > _MAX_EVENT_BYTES:
            out.append(self._buffer)
            self._buffer = b""
        return b"".join(out)

    def close(self) -> bytes:
        """Whatever is left (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return self._process(rest) if rest else b""

    def _boundary(self) -> tuple[int, int]:
        candidates = [(self._buffer.find(s), len(s)) for s in (b"\n\n", b"\r\n\r\n", b"\r\r")]
        found = [c for c in candidates if c[0] >= 0]
        return min(found) if found else (-1, 0)

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
                edited = set_top_level_model(lines[data_lines[0]], new)
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
        edited = set_top_level_model(held, self._rename)
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
    return min(value, MAX_TOKENS) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_numbers(usage: Any) -> dict[str, int]:
    """Token counts of an OpenAI `usage` object (zeros for anything missing or malformed; {} when absent)."""
    if not isinstance(usage, dict):
        return {}
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    out = {
        "input_tokens": _int(usage.get("prompt_tokens", usage.get("input_tokens"))),
        "output_tokens": _int(usage.get("completion_tokens", usage.get("output_tokens"))),
        "total_tokens": _int(usage.get("total_tokens")),
        "cached_tokens": _int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0,
        "reasoning_tokens": (
            _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0
        ),
    }
    out["total_tokens"] = max(out["total_tokens"], out["input_tokens"] + out["output_tokens"])
    return out


@dataclass(frozen=True)
class Charge:
    """What one finished request costs the rate-limit counters, and what the record says about it."""

    numbers: dict[str, int]
    charged: int
    estimated: bool = False
    estimate_reason: str = ""


def charge_for(status: int, usage: Any, body: PreparedBody, termination: str, *,
               completion_ceiling: int = DEFAULT_COMPLETION_CEILING) -> Charge:
    """The tokens to charge for a request (see the module docstring for the estimate)."""
    numbers = usage_numbers(usage)
    if numbers and numbers["total_tokens"] > 0:
        return Charge(numbers, numbers["total_tokens"])
    if not 200 <= status < 300:
        return Charge(numbers, 0)
    completion = body.max_tokens or completion_ceiling
    estimate = max(2, body.prompt_estimate + completion)
    reason = "usage missing from the answer" if termination == "complete" else f"usage unreadable ({termination})"
    return Charge(numbers or {}, min(estimate, MAX_TOKENS), True, reason)


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
