"""Report time ranges (pure): `last 1d/7d/30d/90d/1y` or explicit from/to, at the rollups' resolution.

Reports have hour resolution (the hourly rollup): `from` is rounded down and `to` up to a whole UTC hour;
`last Nd` ends with the current hour. Exports group by day or month and so use whole UTC days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

RangeName = Literal["1d", "7d", "30d", "90d", "1y"]
RANGES: dict[str, timedelta] = {
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "90d": timedelta(days=90),
    "1y": timedelta(days=365),
}
MAX_SPAN = timedelta(days=3660)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


class RangeError(ValueError):
    """The requested time range is not usable (`code` is returned to clients)."""

    code = "invalid_time_range"


@dataclass(frozen=True)
class TimeRange:
    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def floor_hour(value: datetime) -> datetime:
    return _utc(value).replace(minute=0, second=0, microsecond=0)


def ceil_hour(value: datetime) -> datetime:
    down = floor_hour(value)
    return down if down == _utc(value) else down + HOUR


def floor_day(value: datetime) -> datetime:
    return floor_hour(value).replace(hour=0)


def ceil_day(value: datetime) -> datetime:
    down = floor_day(value)
    return down if down == _utc(value) else down + DAY


def as_date(value: datetime) -> date:
    return _utc(value).date()


def resolve(
    now: datetime,
    range_name: str | None,
    start: datetime | None,
    end: datetime | None,
    *,
    whole_days: bool = False,
) -> TimeRange:
    """The range a request asks for; explicit `start`/`end` win over `range_name` (default `7d`).
    Naive datetimes are taken as UTC."""
    floor, ceil = (floor_day, ceil_day) if whole_days else (floor_hour, ceil_hour)
    if start is not None or end is not None:
        if range_name is not None:
            raise RangeError("give either range or from/to, not both")
        if start is None:
            raise RangeError("from is required with to")
        lo = floor(start)
        hi = ceil(end) if end is not None else ceil(now)
    else:
        span = RANGES.get(range_name or "7d")
        if span is None:
            raise RangeError(f"range must be one of {', '.join(RANGES)}")
        hi = floor(now) + (DAY if whole_days else HOUR)  # the current hour (day) is always included
        lo = hi - span
    if hi <= lo:
        raise RangeError("from must be before to")
    if hi - lo > MAX_SPAN:
        raise RangeError(f"the range may span at most {MAX_SPAN.days} days")
    return TimeRange(lo, hi)


def floor_month(value: datetime) -> datetime:
    return floor_day(value).replace(day=1)


def ceil_month(value: datetime) -> datetime:
    down = floor_month(value)
    if down == _utc(value):
        return down
    nxt = next_month(down.date())
    return datetime(nxt.year, nxt.month, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Split:
    """`rng` cut into what each rollup answers exactly: partial days (hourly), partial months (daily) and
    whole months (monthly)."""

    hourly: list[TimeRange]
    daily: list[TimeRange]
    monthly: TimeRange | None


def _nonempty(*parts: TimeRange) -> list[TimeRange]:
    return [p for p in parts if p.end > p.start]


def split(rng: TimeRange) -> Split:
    first_day, last_day = ceil_day(rng.start), floor_day(rng.end)
    if first_day >= last_day:
        return Split([rng], [], None)
    hourly = _nonempty(TimeRange(rng.start, first_day), TimeRange(last_day, rng.end))
    first_month, last_month = ceil_month(first_day), floor_month(last_day)
    if first_month >= last_month:
        return Split(hourly, [TimeRange(first_day, last_day)], None)
    daily = _nonempty(TimeRange(first_day, first_month), TimeRange(last_month, last_day))
    return Split(hourly, daily, TimeRange(first_month, last_month))


def next_month(first: date) -> date:
    return date(first.year + (first.month == 12), first.month % 12 + 1, 1)
