"""The usage spool (`maasctl.gateway.spool`) and HttpBatchSink on top of it: append, forget, rotation, replay
after a kill, a cut last line, the bound, and one process per directory."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest

from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.pool import Worker
from maasctl.gateway.spool import NOT_SPOOLED, SpoolLocked, UsageSpool, worker_directories, worker_directory
from maasctl.gateway.usage import HttpBatchSink, UsageRecord
from maasctl.gateway.workers import WorkerPool


def record(i: int) -> UsageRecord:
    return UsageRecord(timestamp=1.0 + i, request_id=f"r{i}", user="alice", key_id="k", subscription="ns/s",
                       model="m/x", route="m/r", status=200, latency_ms=1.0, total_tokens=i)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("usage-*.jsonl"))


def lines_on_disk(directory: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in segments(directory))


def test_append_writes_one_json_line_per_record_before_returning(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, segment_records=10)
    spool.recover()
    seg = spool.append(record(1))
    spool.append(record(2))
    (path,) = segments(tmp_path)  # visible to another process without closing: flushed
    assert [json.loads(line)["request_id"] for line in path.read_bytes().splitlines()] == ["r1", "r2"]
    assert seg != NOT_SPOOLED and spool.live == 2
    spool.close()


def test_a_segment_is_deleted_once_every_record_in_it_is_forgotten(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, segment_records=3)
    spool.recover()
    segs = [spool.append(record(i)) for i in range(7)]  # 3 + 3 + 1: rotated twice
    assert len(set(segs)) == 3 and len(segments(tmp_path)) == 3
    for s in segs[:2]:
        spool.forget(s)
    assert len(segments(tmp_path)) == 3  # r2 of the first segment still needed
    spool.forget(segs[2])
    assert len(segments(tmp_path)) == 2 and spool.live == 4
    for s in segs[3:]:
        spool.forget(s)
    assert segments(tmp_path) == [] and spool.segments == 0  # the active segment too, once all acknowledged
    spool.append(record(8))  # a new segment after that
    assert len(segments(tmp_path)) == 1
    spool.close()


def test_replay_returns_what_was_not_forgotten_and_skips_a_cut_last_line(tmp_path: Path) -> None:
    first = UsageSpool(tmp_path, segment_records=2)
    first.recover()
    segs = [first.append(record(i)) for i in range(5)]
    first.forget(segs[0])
    first.forget(segs[1])  # r0, r1: segment gone
    with open(segments(tmp_path)[-1], "ab") as f:  # killed mid-write: half a line at the end
        f.write(record(9).model_dump_json().encode()[:25])
    first.close()  # a kill would not even do this; the lock goes with the process either way

    second = UsageSpool(tmp_path)
    replayed = second.recover()
    assert [s.record for s in replayed] == [record(2), record(3), record(4)]
    assert second.replayed == 3 and second.corrupt == 1
    new = second.append(record(10))
    assert new > max(segs)  # never continues an old segment (nor its cut line)
    for s in replayed:
        second.forget(s.segment)
    assert [p.name for p in segments(tmp_path)] == [f"usage-{new:012d}.jsonl"]
    second.close()


def test_a_segment_with_only_unreadable_lines_is_removed(tmp_path: Path) -> None:
    (tmp_path / "usage-000000000004.jsonl").write_bytes(b'{"request_id": "x"\n\x00\x00garbage\n')
    spool = UsageSpool(tmp_path)
    assert spool.recover() == [] and spool.corrupt == 2 and segments(tmp_path) == []
    assert spool.append(record(1)) == 5
    spool.close()


def test_one_process_per_directory(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path)
    with pytest.raises(SpoolLocked):
        UsageSpool(tmp_path)
    spool.close()
    UsageSpool(tmp_path).close()


class _DiskFull:
    """A segment file that takes half of the next write, then fails (ENOSPC)."""

    def __init__(self, real: BinaryIO) -> None:
        self.real = real

    def write(self, data: bytes) -> int:
        self.real.write(data[: len(data) // 2])
        self.real.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.real.close()


def test_a_failed_append_keeps_the_record_in_memory_and_never_continues_a_cut_line(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path)
    spool.recover()
    first = spool.append(record(1))
    assert spool._file is not None
    spool._file = _DiskFull(spool._file)  # type: ignore[assignment]
    assert spool.append(record(2)) == NOT_SPOOLED and spool.write_failures == 1
    assert spool.append(record(3)) > first  # a new segment, not after the half line
    spool.close()
    again = UsageSpool(tmp_path)
    assert [s.record.request_id for s in again.recover()] == ["r1", "r3"] and again.corrupt == 1
    again.close()


def _down(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


async def test_records_a_stopped_sink_could_not_deliver_are_sent_by_the_next_one(tmp_path: Path) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_down)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=4, flush_interval=3600, close_timeout=0,
                             spool=UsageSpool(tmp_path))
        for i in range(6):
            sink.emit(record(i))
        await sink.aclose()
    assert sink.kept == 6 and sink.undelivered == 0 and lines_on_disk(tmp_path) == 6

    stored: dict[str, int] = {}

    def up(request: httpx.Request) -> httpx.Response:
        for r in json.loads(request.content)["records"]:
            stored[r["request_id"]] = stored.get(r["request_id"], 0) + 1
        return httpx.Response(202)

    async with httpx.AsyncClient(transport=httpx.MockTransport(up)) as http:
        spool = UsageSpool(tmp_path)
        sink = HttpBatchSink("http://m", http, batch_size=4, flush_interval=3600, spool=spool)
        assert sink.pending == 6 and spool.replayed == 6
        sink.emit(record(6))
        assert await sink.flush()
        await sink.aclose()
    assert stored == {f"r{i}": 1 for i in range(7)} and sink.sent == 7
    assert segments(tmp_path) == []  # everything acknowledged: nothing to send again


async def test_the_spool_is_bounded_like_the_buffer_and_forgets_dropped_records(tmp_path: Path) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_down)) as http:
        spool = UsageSpool(tmp_path, segment_records=5)
        sink = HttpBatchSink("http://m", http, batch_size=4, flush_interval=3600, max_buffer=20,
                             close_timeout=0, spool=spool)
        for i in range(500):
            sink.emit(record(i))
            if i % 37 == 0:
                assert not await sink.flush()  # in flight and failing now and then
            assert lines_on_disk(tmp_path) <= 20 + 3 * 5
        assert sink.dropped == 480 and sink.pending == 20 and spool.live == 20
        assert not sink.accepting()  # above the high-water mark: the gateway refuses new requests
        await sink.aclose()
    replay = UsageSpool(tmp_path)
    assert {s.record.request_id for s in replay.recover()} >= {f"r{i}" for i in range(480, 500)}
    replay.close()


async def test_a_replay_larger_than_the_buffer_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, segment_records=1)  # one record per segment: a drop deletes its record
    spool.recover()
    for i in range(10):
        spool.append(record(i))
    spool.close()
    async with httpx.AsyncClient(transport=httpx.MockTransport(_down)) as http:
        sink = HttpBatchSink("http://m", http, flush_interval=3600, max_buffer=4, close_timeout=0,
                             spool=UsageSpool(tmp_path))
        assert sink.pending == 4 and sink.dropped == 6
        await sink.aclose()
    final = UsageSpool(tmp_path)
    assert [s.record.request_id for s in final.recover()] == ["r6", "r7", "r8", "r9"]  # drops are forgotten
    final.close()


async def test_at_close_a_record_the_spool_could_not_take_is_counted_undelivered(tmp_path: Path) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_down)) as http:
        spool = UsageSpool(tmp_path)
        sink = HttpBatchSink("http://m", http, flush_interval=3600, close_timeout=0, spool=spool)
        sink.emit(record(1))
        assert spool._file is not None
        spool._file = _DiskFull(spool._file)  # type: ignore[assignment]
        sink.emit(record(2))
        assert sink.pending == 2 and spool.write_failures == 1  # kept in memory all the same
        await sink.aclose()
    assert sink.kept == 1 and sink.undelivered == 1


def spool_with(directory: Path, *ids: int) -> None:
    """A spool that a killed (or stopped) process left in `directory`, holding records `ids`."""
    spool = UsageSpool(directory)
    spool.recover()
    for i in ids:
        spool.append(record(i))
    spool.close()


def recovered(directory: Path) -> list[str]:
    spool = UsageSpool(directory)
    try:
        return sorted(s.record.request_id for s in spool.recover())
    finally:
        spool.close()


def test_one_process_on_a_pools_spool_sends_what_every_worker_left(tmp_path: Path) -> None:
    spool_with(tmp_path, 1)
    spool_with(worker_directory(tmp_path, 0), 2, 3)
    spool_with(worker_directory(tmp_path, 3), 4)
    assert recovered(tmp_path) == ["r1", "r2", "r3", "r4"]  # --workers 4, then 1: nothing left behind
    assert worker_directories(tmp_path) == []  # the emptied worker directories are gone
    assert recovered(tmp_path) == ["r1", "r2", "r3", "r4"]  # still there until forgotten, once each


def test_a_pool_gives_every_record_under_its_spool_to_one_of_its_workers(tmp_path: Path) -> None:
    spool_with(tmp_path, 1)  # a one-process run
    for index, ids in ((0, (2,)), (1, (3, 4)), (2, (5,)), (3, (6,))):  # a run of four workers
        spool_with(worker_directory(tmp_path, index), *ids)
    pool = WorkerPool(GatewaySettings(workers=2, redis_url="redis://unused", usage_spool_dir=str(tmp_path)),
                      _never_run)
    pool.start()
    try:
        with pytest.raises(SpoolLocked):  # the root is the pool's while it runs
            UsageSpool(tmp_path)
        assert [i for i, _ in worker_directories(tmp_path)] == [0, 1]
        assert recovered(worker_directory(tmp_path, 0)) == ["r1", "r2", "r5"]
        assert recovered(worker_directory(tmp_path, 1)) == ["r3", "r4", "r6"]
    finally:
        pool.close()
    assert recovered(tmp_path) == [f"r{i}" for i in range(1, 7)]  # and back to one process: all of them


def test_a_worker_directory_a_live_process_writes_is_never_taken(tmp_path: Path) -> None:
    live = UsageSpool(worker_directory(tmp_path, 1))
    live.recover()
    live.append(record(1))
    with pytest.raises(SpoolLocked):
        UsageSpool(tmp_path)
    live.close()
    assert recovered(tmp_path) == ["r1"]


async def _never_run(settings: GatewaySettings, worker: Worker) -> int:
    raise AssertionError("no worker is spawned here")
