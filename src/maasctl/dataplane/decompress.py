"""An answer's Content-Encoding undone for scanning its usage.

The gateway asks upstream for `Accept-Encoding: identity` and decompresses gzip/deflate answers it must scan
(`Decompressor`), every byte of them; an encoding it cannot read, invalid data or a chunk that would inflate
beyond `DECOMPRESS_LIMIT` (a bomb) is counted as unreadable — never scanned short.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

__all__ = [
    "DECOMPRESS_LIMIT",
    "Decompressor",
]

DECOMPRESS_LIMIT: Final = 16 * 1024 * 1024  # per `Decompressor.feed`: a whole realistic answer, not a bomb


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
