"""The upstream leg: which headers and body go to the model, and how usage is read from the answer.

Request headers follow `contract.edge.upstream_headers` (the header contract); here: response headers
(hop-by-hop dropped) and the body.

Streaming: a JSON request with `"stream": true` that did not ask for usage gets
`stream_options.include_usage: true` upstream, so streaming cannot bypass the quota; the usage-only chunk
this adds (`"choices": []` with `usage`) is then dropped from what the client receives. Usage is taken
from the last SSE chunk that carries it, or from the JSON body of a non-streamed answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from maasctl.contract.edge import HOP_BY_HOP

__all__ = [
    "JsonUsageScanner",
    "PreparedBody",
    "SseUsageFilter",
    "prepare_body",
    "response_headers",
]

def response_headers(upstream: Iterable[tuple[str, str]], *, body_changed: bool) -> list[tuple[bytes, bytes]]:
    """Upstream response headers for the client (hop-by-hop dropped; length dropped when we edit the body)."""
    out = []
    for name, value in upstream:
        lname = name.lower()
        if lname in HOP_BY_HOP or (body_changed and lname == "content-length"):
            continue
        out.append((lname.encode("latin-1"), value.encode("latin-1")))
    return out


@dataclass(frozen=True)
class PreparedBody:
    content: bytes
    streaming: bool = False
    injected_usage: bool = False
    model: str | None = None


def prepare_body(raw: bytes, content_type: str) -> PreparedBody:
    """Parse an OpenAI-style JSON body; ask for streamed usage when the client did not."""
    if not raw or "json" not in content_type.lower():
        return PreparedBody(raw)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return PreparedBody(raw)
    if not isinstance(body, dict):
        return PreparedBody(raw)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if body.get("stream") is not True:
        return PreparedBody(raw, model=model)
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return PreparedBody(raw, streaming=True, model=model)
    body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return PreparedBody(json.dumps(body, separators=(",", ":")).encode(), True, True, model)


class SseUsageFilter:
    """Splits an SSE byte stream into events, remembers the last `usage`, drops the injected usage chunk."""

    def __init__(self, drop_usage_chunk: bool) -> None:
        self._drop = drop_usage_chunk
        self._buffer = b""
        self.usage: Any = None

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
            if self._keep(event):
                out.append(event)
        return b"".join(out)

    def close(self) -> bytes:
        """Whatever is left (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return rest if rest and self._keep(rest) else b""

    def _boundary(self) -> tuple[int, int]:
        candidates = [(self._buffer.find(s), len(s)) for s in (b"\n\n", b"\r\n\r\n", b"\r\r")]
        found = [c for c in candidates if c[0] >= 0]
        return min(found) if found else (-1, 0)

    def _keep(self, event: bytes) -> bool:
        data = b"".join(
            line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")
        )
        if not data or data.strip() == b"[DONE]" or b'"usage"' not in data:
            return True
        try:
            chunk = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return True
        if not isinstance(chunk, dict) or not chunk.get("usage"):
            return True
        self.usage = chunk["usage"]
        return not (self._drop and not chunk.get("choices"))


class JsonUsageScanner:
    """Collects a JSON response body (up to `limit` bytes) to read its `usage` at the end."""

    def __init__(self, limit: int) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = limit
        self.overflow = False

    def feed(self, chunk: bytes) -> None:
        if self.overflow:
            return
        self._size += len(chunk)
        if self._size > self._limit:
            self.overflow = True
            self._parts.clear()
        else:
            self._parts.append(chunk)

    @property
    def usage(self) -> Any:
        if self.overflow or not self._parts:
            return None
        try:
            body = json.loads(b"".join(self._parts))
        except (ValueError, UnicodeDecodeError):
            return None
        return body.get("usage") if isinstance(body, dict) else None
