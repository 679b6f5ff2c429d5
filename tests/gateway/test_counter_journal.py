"""The in-process counters' journal: a store opened again on the journal a killed one left has the same counts
(token and request limits, reservations excepted), skips expired counters and a line cut by a kill, stays
compact, and belongs to one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from maasctl.gateway.counter_journal import CounterJournal
from maasctl.gateway.counters import (
    JOURNAL_NAME,
    CounterKey,
    MemoryCounterStore,
    RedisCounterStore,
    Slot,
    counter_store,
)
from maasctl.gateway.spool import SpoolLocked


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


DAY: CounterKey = ("llm/route", "sub/tokens", 86_400, ("alice",))
MINUTE: CounterKey = ("llm/route#requests", "sub/requests", 60, ("alice",))


def cut_short(path: Path, partial: bytes) -> None:
    with open(path, "ab") as f:
        f.write(partial)


def store(path: Path, clock: Clock, **kw: int) -> MemoryCounterStore:
    return MemoryCounterStore(clock, journal=CounterJournal(path / JOURNAL_NAME, **kw))


async def test_a_store_reopened_after_a_kill_has_the_counts_and_windows_of_the_killed_one(tmp_path: Path) -> None:
    clock = Clock()
    first = store(tmp_path, clock)
    assert await first.reserve([Slot(DAY, 100), Slot(MINUTE, 100)], 40) is None
    await first.settle([DAY, MINUTE], 40, 35)
    clock.now += 10
    assert await first.reserve([Slot(DAY, 100)], 70) is None
    await first.settle([DAY], 70, 70)
    assert await first.reserve([Slot(DAY, 200)], 1) is None  # in flight when killed: dies with the process
    # killed: no aclose(); only the lock goes with the process
    first._journal._close_file()  # type: ignore[union-attr]
    first._journal.close()  # type: ignore[union-attr]

    second = store(tmp_path, clock)
    day, minute = await second.read([DAY, MINUTE])
    assert (day.used, day.reserved, minute.used) == (105, 0, 35)
    assert day.resets_in == pytest.approx(86_390) and minute.resets_in == pytest.approx(50)
    denied = await second.reserve([Slot(DAY, 100)], 1)
    assert denied is not None and denied.usage.used == 105  # the exhausted 24 h limit stays exhausted
    clock.now += 60
    await second.aclose()
    third = store(tmp_path, clock)  # the minute window is over: not restored; the day's still is
    assert [u.used for u in await third.read([DAY, MINUTE])] == [105, 0]
    await third.aclose()


async def test_a_line_cut_by_a_kill_is_skipped_and_never_continued(tmp_path: Path) -> None:
    clock = Clock()
    first = store(tmp_path, clock)
    await first.settle([DAY], 0, 12)
    await first.aclose()
    cut_short(tmp_path / JOURNAL_NAME, b'["llm/route","sub/tokens",86400,["alice"],99')  # killed mid-write
    second = store(tmp_path, clock)
    assert second._journal.corrupt == 1  # type: ignore[union-attr]
    assert (await second.read([DAY]))[0].used == 12
    await second.settle([DAY], 0, 3)
    await second.aclose()
    third = store(tmp_path, clock)
    assert (await third.read([DAY]))[0].used == 15
    assert third._journal.corrupt == 0  # type: ignore[union-attr]  # the load rewrote the journal
    await third.aclose()


async def test_the_journal_is_rewritten_with_the_live_counters_when_it_grows(tmp_path: Path) -> None:
    clock = Clock()
    s = store(tmp_path, clock, compact_lines=50)
    for _ in range(500):
        await s.settle([DAY, MINUTE], 0, 1)
    lines = (tmp_path / JOURNAL_NAME).read_bytes().splitlines()
    assert len(lines) <= 52  # compacted, not 1,000 lines
    assert [u.used for u in await s.read([DAY, MINUTE])] == [500, 500]
    await s.clear()
    assert (tmp_path / JOURNAL_NAME).read_bytes() == b""
    await s.aclose()


async def test_one_process_per_journal(tmp_path: Path) -> None:
    first = store(tmp_path, Clock())
    with pytest.raises(SpoolLocked):
        store(tmp_path, Clock())
    await first.aclose()
    store(tmp_path, Clock()).clock()  # released with the first


async def test_the_gateway_keeps_counters_beside_its_spool_or_in_redis() -> None:
    memory = counter_store(None, None)
    assert isinstance(memory, MemoryCounterStore) and memory._journal is None  # a throwaway run
    redis = counter_store("redis://127.0.0.1:1/0", "/nonexistent")
    assert isinstance(redis, RedisCounterStore)
    await redis.aclose()
