"""Usage over time for charts, built from maas-api's range queries (hour resolution): one query per bucket,
a few at a time. Buckets are whole UTC hours, days, weeks or months ending with the current one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

RANGES: dict[str, str] = {"1d": "Last 1 day", "7d": "Last 7 days", "30d": "Last 30 days", "90d": "Last 90 days",
                          "1y": "Last 1 year"}


@dataclass(frozen=True)
class Bucket:
    label: str
    start: datetime
    end: datetime


def _month_start(value: datetime, back: int) -> datetime:
    month = value.month - 1 - back
    return value.replace(year=value.year + month // 12, month=month % 12 + 1, day=1, hour=0)


def buckets(range_name: str, now: datetime) -> list[Bucket]:
    """The chart's periods for `range_name` (one of RANGES), oldest first."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    if range_name == "1d":
        return [Bucket(f"{(hour - timedelta(hours=i)):%H}:00", hour - timedelta(hours=i),
                       hour - timedelta(hours=i - 1)) for i in range(23, -1, -1)]
    if range_name in ("7d", "30d"):
        n = int(range_name[:-1])
        return [Bucket(f"{(day - timedelta(days=i)):%b %d}", day - timedelta(days=i), day - timedelta(days=i - 1))
                for i in range(n - 1, -1, -1)]
    if range_name == "90d":
        week = day - timedelta(days=day.weekday())
        return [Bucket(f"{(week - timedelta(weeks=i)):%b %d}", week - timedelta(weeks=i),
                       week - timedelta(weeks=i - 1)) for i in range(12, -1, -1)]
    if range_name == "1y":
        out = []
        for i in range(11, -1, -1):
            start = _month_start(day, i)
            end = _month_start(day, i - 1)
            out.append(Bucket(f"{start:%b %Y}", start, end))
        return out
    raise ValueError(f"unknown range {range_name!r}")


async def series(bucket_list: Sequence[Bucket], total: Callable[[Bucket], Awaitable[int]],
                 concurrency: int = 6) -> list[tuple[str, int]]:
    """(label, tokens) per bucket, asking `total` for each with bounded concurrency."""
    gate = asyncio.Semaphore(concurrency)

    async def one(b: Bucket) -> int:
        async with gate:
            return await total(b)

    values = await asyncio.gather(*(one(b) for b in bucket_list))
    return [(b.label, v) for b, v in zip(bucket_list, values, strict=True)]


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour"}


def usage_query(window: str, now: datetime) -> tuple[dict[str, str], str]:
    """How to ask maas-api for the current use of a limit window, and how to say it: a window up to an hour is
    asked as itself (`window`, read from the records: "last minute"), a longer one at the reports' hour resolution
    (that many whole hours up to now: "last 24 hours")."""
    unit, amount = window[-1], int(window[:-1])
    seconds = amount * {"s": 1, "m": 60, "h": 3600}[unit]
    if seconds <= 3600:
        word = _UNIT_WORDS[unit]
        return {"window": window}, f"last {word}" if amount == 1 else f"last {amount} {word}s"
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = -(-seconds // 3600)
    return {"from": iso(hour - timedelta(hours=hours - 1))}, f"last {hours} hours"
