"""The usage of a JSON answer, and a renamed model's name written into an answer.

`JsonUsageScanner` reads `usage` from a JSON answer of any size with bounded memory: the whole body when it
is small, else the last `TAIL_BYTES` (where OpenAI-compatible servers put `usage`). Answers of a renamed
model name the published model, not the provider's: `JsonModelRewriter` rewrites a JSON answer's top-level
`model` (up to a size bound); `set_top_level_model` and `rename_top_level_model` are the byte edits it and
the SSE usage filter (`dataplane.sse`) share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "TAIL_BYTES",
    "JsonModelRewriter",
    "JsonUsageScanner",
    "rename_top_level_model",
    "replace_spans",
    "set_top_level_model",
]

TAIL_BYTES: Final = 64 * 1024
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
