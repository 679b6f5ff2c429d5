"""An incremental reader and writer of server-sent events: bytes in any chunking (an event, a line, a UTF-8
character or a CRLF split across reads) give the same events, so stream translators never see half an event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_EVENT_BYTES", "SseEvent", "SseParser", "encode_event"]

MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
"""One event larger than this is no provider's: refused rather than buffered without bound."""


@dataclass(frozen=True)
class SseEvent:
    """One event: its `event:` name (None when unnamed) and its `data:` lines joined by newlines."""

    event: str | None
    data: str


class SseParser:
    """Feed bytes, get the events completed so far (per the SSE spec: CR, LF or CRLF line ends, comments
    and `id:`/`retry:` ignored, several `data:` lines joined)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events `chunk` completes. Raises ValueError for an event over `MAX_EVENT_BYTES`."""
        data = self._buffer + chunk
        hold = data.endswith(b"\r")  # may be the first half of a CRLF: decide with the next chunk
        if hold:
            data = data[:-1]
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *complete, rest = data.split(b"\n\n")
        self._buffer = rest + (b"\r" if hold else b"")
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise ValueError("server-sent event too large")
        return [event for raw in complete if (event := _parse(raw)) is not None]

    def close(self) -> list[SseEvent]:
        """The last event when the stream ended without its blank line (servers do this)."""
        rest, self._buffer = self._buffer.replace(b"\r", b"\n"), b""
        event = _parse(rest.strip(b"\n")) if rest.strip() else None
        return [event] if event is not None else []


def _parse(raw: bytes) -> SseEvent | None:
    """One event's lines; None for an event without data (a comment, a keep-alive)."""
    name: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", errors="replace").split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return SseEvent(name, "\n".join(data)) if data else None


def encode_event(data: str, event: str | None = None) -> bytes:
    """One event as bytes (`data` holds no newline: compact JSON)."""
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {data}\n\n".encode()
