"""A journal of the in-process token and request counters, so a restarted gateway keeps counting where it was.

Why: `MemoryCounterStore` lived in process memory only, so a gateway killed and started again (kill -9, OOM, a
new version) forgot every count, 24-hour limits and a Prepaid wallet's allowance included: an exhausted
subscription was served again. With a journal (the gateway keeps it beside its usage spool, `counters.jsonl` in
`--usage-spool-dir`) every change of a counter's used amount is appended as one JSON line
`[domain, limit, seconds, [values], used, expires_at]` (the counter's whole state, so the last line of a key wins)
and flushed to the OS, as the spool's records are: it survives the death of the process, not a node crash
unless the directory is on storage that syncs. At start the journal is read (expired counters, unreadable lines
and a line cut short by a kill are skipped) and rewritten with the live counters only, atomically (a temporary
file renamed over it), and the journal is rewritten the same way whenever it holds many more lines than live
counters. Reservations are not journaled: they belong to requests in flight, which die with the process.

One process per journal: a second gateway on the same directory is refused (an exclusive lock), as for the
spool. Without a journal (no spool directory) the counters are in memory only: a throwaway run; several
replicas share counters in Redis (`--redis-url`), which a gateway restart does not touch either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from maasctl.gateway.spool import SpoolLocked

__all__ = ["CounterJournal", "Entries"]

log = logging.getLogger("maasctl.gateway.counters")

Entries = dict[tuple[str, str, int, tuple[str, ...]], list[float]]
"""Counter key -> [used, expires_at] (Unix seconds), as `MemoryCounterStore` keeps them."""


class CounterJournal:
    """The append-only journal of one gateway's counters (see the module docstring)."""

    def __init__(self, path: Path, *, compact_lines: int = 10_000) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise SpoolLocked(f"counter journal {path} is in use by another process") from None
        self._file: BinaryIO | None = None
        self._lines = 0
        self._compact_lines = max(1, compact_lines)
        self.corrupt = 0
        self.write_failures = 0

    def load(self, now: float) -> Entries:
        """The live counters the journal holds (the last line of each key), then the journal rewritten with
        only those."""
        entries: Entries = {}
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                domain, name, seconds, values, used, expires = json.loads(line)
                key = (str(domain), str(name), int(seconds), tuple(str(v) for v in values))
                entry = [float(int(used)), float(expires)]
            except (ValueError, TypeError):
                self.corrupt += 1
                continue
            entries[key] = entry
        live = {k: e for k, e in entries.items() if e[1] > now}
        if live or self.corrupt:
            log.warning("counter journal %s: %d live counters restored, %d unreadable lines skipped", self.path,
                        len(live), self.corrupt)
        self.compact(live.items())
        return live

    @staticmethod
    def _line(key: tuple[str, str, int, tuple[str, ...]], entry: list[float]) -> bytes:
        return json.dumps([key[0], key[1], key[2], list(key[3]), int(entry[0]), entry[1]],
                          separators=(",", ":")).encode() + b"\n"

    def write(self, key: tuple[str, str, int, tuple[str, ...]], entry: list[float]) -> None:
        """Append one counter's state (flushed to the OS). A failure is logged once and counted: the counter
        then lives in memory only until the next successful write or compaction."""
        try:
            if self._file is None:
                self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across appends
            self._file.write(self._line(key, entry))
            self._file.flush()
            self._lines += 1
        except OSError as exc:
            if not self.write_failures:
                log.error("counter journal %s: append failed (%s); counters are kept in memory only",
                          self.path, type(exc).__name__)
            self.write_failures += 1
            self._close_file()  # a partial line must never be continued: the next write reopens

    def needs_compaction(self, live: int) -> bool:
        return self._lines > max(self._compact_lines, 2 * live)

    def compact(self, entries: Iterable[tuple[tuple[str, str, int, tuple[str, ...]], list[float]]]) -> None:
        """Rewrite the journal with exactly `entries`, atomically (a kill leaves the old or the new file)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            lines = 0
            with open(tmp, "wb") as out:
                for key, entry in entries:
                    out.write(self._line(key, entry))
                    lines += 1
                out.flush()
                os.fsync(out.fileno())
            self._close_file()
            os.replace(tmp, self.path)
            self._lines = lines
        except OSError as exc:
            log.error("counter journal %s: compaction failed (%s); appending to the old journal",
                      self.path, type(exc).__name__)
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def close(self) -> None:
        """Close the journal and release its lock; what it holds is kept for the next process."""
        self._close_file()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
