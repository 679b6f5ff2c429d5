"""The usage of an event stream: `SseUsageFilter` takes the last `usage` of an SSE answer, event by event,
drops the usage chunk the gateway asked for on behalf of a client that did not, and with `rename_to` rewrites
each event's top-level `model`, so a renamed model's stream names the published model, not the provider's.
"""

from __future__ import annotations

import json
from typing import Any, Final

from maasctl.dataplane.jsonscan import rename_top_level_model

__all__ = ["SseUsageFilter"]

_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
_SEPARATORS: Final = (b"\n\n", b"\r\n\r\n", b"\r\r")


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


def _with_data(event: bytes, data: bytes) -> bytes:
    """`event` with its data lines replaced by one `data:` line (other fields and the separator kept)."""
    body = event.rstrip(b"\r\n")
    separator = event[len(body):] or b"\n\n"
    newline = b"\r\n" if b"\r\n" in separator else b"\n"
    lines = [line for line in body.splitlines() if not line.startswith(b"data:")]
    return newline.join([*lines, b"data: " + data]) + separator
