"""A durable spool for the gateway's usage records (`--usage-spool-dir`), so a killed gateway bills what it served.

Why: `HttpBatchSink` keeps records in memory until maas-api stored them; a gateway killed outright (SIGKILL,
OOM, crash) lost everything not yet delivered, i.e. served those requests for free. With a spool every record
is first appended as one JSON line to a segment file, and a new gateway process started on the same directory
sends every record it finds there again. maas-api stores records idempotently by `request_id`, so sending a
record twice is harmless: delivery is at-least-once, storage exactly-once.

Layout: `usage-<n>.jsonl` segment files (n increasing) and a `lock` file. The sink hands back a record's
segment once the record is acknowledged by maas-api (or rejected, or dropped from a full buffer):
`forget(segment)`. A segment is deleted once every record in it is forgotten; the segment being written is
also closed and deleted as soon as that happens, so in steady state (maas-api reachable) the directory holds
about one batch. A record is forgotten durably by deleting its whole segment; records acknowledged in a
segment that still holds unacknowledged ones are sent again after a kill (maas-api skips them), and so may a
record dropped from a full buffer (counted as dropped, yet stored: never billed twice).

Bounded: the sink appends a record only when its memory buffer (`max_buffer`) has room, and forgets the
records it drops; the buffer is two runs of consecutive records (a batch in flight and the newest ones), so
live segments hold at most `max_buffer + 3 * segment_records` records.

Durability: a write is `write()` + `flush()` into the kernel's page cache, no fsync per record: it survives
the death of the process (the case that matters: OOM, SIGKILL, a crash) but a node crash or power loss can
lose the last seconds of records unless the directory is on storage that syncs them. A line cut short by a
kill mid-write (or any unreadable line) is skipped and counted at start-up, never fatal; new records always
go to a new segment, so a cut line is never continued.

The append happens on the event loop: one small buffered write of a few hundred bytes costs microseconds,
less than encoding the record, and doing it inline is what makes "counted as recorded" mean "on disk" without
a queue whose contents a kill would lose again. Segment deletion (one unlink per segment) is equally small.
Records carry no secrets (no API keys), so the files hold none either.

Worker processes (`--workers N`, `maasctl.gateway.workers`): each worker spools in its own `worker-<i>`
directory under the spool root, whose lock the parent holds; a killed worker is started again on its directory
and recovers it. Nothing is ever left behind when the number of workers changes: the parent moves the segments
of the root (a one-process run) into worker 0's and those of a worker beyond the new count into a remaining
worker's before it starts them, and a one-process spool moves every `worker-<i>` beneath it into itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from prometheus_client import Counter
from pydantic import ValidationError

from maasctl.contract.usage import UsageRecord

__all__ = ["SPOOL_RECORDS", "SpoolLocked", "Spooled", "UsageSpool", "adopt_directory", "lock_directory",
           "move_segments", "worker_directories", "worker_directory"]

log = logging.getLogger("maasctl.gateway.spool")

SPOOL_RECORDS = Counter(
    "maas_gateway_usage_spool_records_total",
    "Usage spool records by outcome: replayed (found at start and sent again), corrupt (an unreadable line at "
    "start, e.g. cut by a kill mid-write; skipped), write_failed (could not be appended; kept in memory only)",
    ["outcome"])

_SEGMENT = re.compile(r"^usage-(\d{12})\.jsonl$")
_WORKER_PREFIX = "worker-"
_WORKER = re.compile(r"^worker-(\d{1,6})$")
NOT_SPOOLED = 0  # the segment of a record that is not in the spool (its append failed)


class SpoolLocked(RuntimeError):
    """Another live process uses the spool directory (two gateways must never share one)."""


def lock_directory(directory: Path) -> int:
    """Create `directory` if needed and take its lock (released by closing the returned descriptor, or by the
    process's death); SpoolLocked when another live process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SpoolLocked(f"usage spool {directory} is in use by another process") from None
    return fd


def _segments(directory: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _SEGMENT.match(p.name)))


def worker_directory(root: Path, index: int) -> Path:
    """The spool of worker `index` of a gateway (or processor) running several worker processes on `root`."""
    return root / f"{_WORKER_PREFIX}{index}"


def worker_directories(root: Path) -> list[tuple[int, Path]]:
    """The worker spools under `root` (an earlier pool's included), by index."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _WORKER.match(p.name)) and p.is_dir()]
    return sorted(found)


def move_segments(source: Path, target: Path) -> int:
    """Move the segment files of `source` into `target`, numbered after `target`'s own, so that the process that
    recovers `target` sends them; returns how many moved. The caller holds both directories' locks. A rename is
    atomic: a kill mid-way leaves each segment in one of the two directories, recovered from there."""
    taken = _segments(target)
    number = (taken[-1] + 1) if taken else 1
    moved = 0
    for segment in _segments(source):
        os.rename(source / f"usage-{segment:012d}.jsonl", target / f"usage-{number:012d}.jsonl")
        number, moved = number + 1, moved + 1
    if moved:
        log.warning("usage spool %s: %d segment files of %s moved here to be sent", target, moved, source)
    return moved


def adopt_directory(source: Path, target: Path) -> int:
    """Move a worker directory's segments into `target` (whose lock the caller holds) and delete the emptied
    directory; `source` is locked meanwhile (SpoolLocked when a live process still writes it)."""
    fd = lock_directory(source)
    try:
        moved = move_segments(source, target)
        if not any(p.name != "lock" for p in source.iterdir()):
            (source / "lock").unlink(missing_ok=True)
            source.rmdir()
    finally:
        os.close(fd)
    return moved


@dataclass(frozen=True)
class Spooled:
    """A record found in the spool at start-up and the segment holding it."""

    record: UsageRecord
    segment: int


class UsageSpool:
    """Segment files of usage records in `directory`; see the module docstring.

    Use: `recover()` once (the records an earlier process left), then `append(record)` for each new record and
    `forget(segment)` once it needs no resending; `close()` keeps what is left for the next process.
    """

    def __init__(self, directory: Path, *, segment_records: int = 1000) -> None:
        self.directory = directory
        self._segment_records = max(1, segment_records)
        self._lock_fd = lock_directory(directory)
        try:
            for _, worker in worker_directories(directory):  # what the workers of an earlier pool left beneath
                adopt_directory(worker, directory)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._live: dict[int, int] = {}  # segment -> records not yet forgotten
        self._found = _segments(directory)
        self._next = (self._found[-1] + 1) if self._found else 1
        self._file: BinaryIO | None = None
        self._active = NOT_SPOOLED
        self._written = 0  # lines in the active segment
        self.replayed = 0
        self.corrupt = 0
        self.write_failures = 0

    def _path(self, segment: int) -> Path:
        return self.directory / f"usage-{segment:012d}.jsonl"

    def recover(self) -> list[Spooled]:
        """The records earlier processes left (oldest first), counted as replayed; unreadable lines are
        skipped and counted as corrupt; segments without a record are deleted."""
        found: list[Spooled] = []
        for segment in self._found:
            path = self._path(segment)
            try:
                lines = path.read_bytes().splitlines()
            except OSError as exc:
                log.error("usage spool segment %s unreadable (%s); skipped", path.name, type(exc).__name__)
                continue
            count = 0
            for line in lines:
                if not line.strip():
                    continue
                try:
                    record = UsageRecord.model_validate_json(line)
                except ValidationError:
                    self.corrupt += 1
                    SPOOL_RECORDS.labels("corrupt").inc()
                    continue
                found.append(Spooled(record, segment))
                count += 1
            if count:
                self._live[segment] = count
            else:
                path.unlink(missing_ok=True)
        self._found = []
        self.replayed += len(found)
        SPOOL_RECORDS.labels("replayed").inc(len(found))
        if found or self.corrupt:
            log.warning("usage spool %s: %d undelivered records from an earlier run will be sent again, %d "
                        "unreadable lines skipped", self.directory, len(found), self.corrupt)
        return found

    def append(self, record: UsageRecord, encoded: bytes | None = None) -> int:
        """Write `record` (one JSON line, flushed to the OS; `encoded` is its `model_dump_json()` when the caller
        has it already) and return its segment for `forget`. NOT_SPOOLED when the write failed: the record then
        lives only in memory (counted, logged once)."""
        line = (encoded if encoded is not None else record.model_dump_json().encode()) + b"\n"
        try:
            if self._file is None:
                self._active, self._next = self._next, self._next + 1
                self._file = open(self._path(self._active), "ab")  # noqa: SIM115 - kept open across appends
                self._written = 0
                self._live[self._active] = 0
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            if not self.write_failures:
                log.error("usage spool %s: append failed (%s); records are kept in memory only until it "
                          "works again", self.directory, type(exc).__name__)
            self.write_failures += 1
            SPOOL_RECORDS.labels("write_failed").inc()
            self._seal()  # a partial line must never be continued by the next record
            return NOT_SPOOLED
        segment = self._active
        self._live[segment] += 1
        self._written += 1
        if self._written >= self._segment_records:
            self._seal()
        return segment

    def _seal(self) -> None:
        """Stop writing the active segment (the next append starts a new one); delete it if nothing in it
        is still needed."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            if not self._live.get(self._active):
                self._delete(self._active)

    def forget(self, segment: int) -> None:
        """One record of `segment` needs no resending (stored, rejected or dropped); deletes the segment once
        that holds for all of its records."""
        if segment == NOT_SPOOLED or segment not in self._live:
            return
        left = self._live[segment] - 1
        self._live[segment] = left
        if left > 0:
            return
        if segment == self._active and self._file is not None:
            self._seal()
        else:
            self._delete(segment)

    def _delete(self, segment: int) -> None:
        self._live.pop(segment, None)
        try:
            self._path(segment).unlink(missing_ok=True)
        except OSError as exc:
            log.error("usage spool: could not delete %s (%s); its records will be sent again",
                      self._path(segment).name, type(exc).__name__)

    @property
    def segments(self) -> int:
        """Segment files still needed."""
        return len(self._live)

    @property
    def live(self) -> int:
        """Records in the spool not yet forgotten."""
        return sum(self._live.values())

    def close(self) -> None:
        """Close the segment being written and release the directory; records not forgotten stay on disk."""
        self._seal()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
