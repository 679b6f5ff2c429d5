"""Longest files first: the order in which the two xdist workers are handed test files (hooked in by
tests/conftest.py, so it orders the whole run's items, e2e/ included).

`--dist loadfile` hands out whole files in collection order (with `--no-loadscope-reorder`; xdist's default
orders them by test count, which puts the few-test, minute-long e2e and browser files last, so the run ended
with one worker busy for minutes while the other had nothing left). Sorting files by their recorded duration,
longest first, is the classic longest-processing-time rule: the tail is at most about one short file.

The durations are a committed estimate (`tests/durations.json`, seconds per file), refreshed from a run's JUnit
report by `hack/test-durations.py`; a file it does not know yet counts as `UNKNOWN_SECONDS`. Tests keep their
order within a file. Only the order changes: what runs, and where fixtures are shared, does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_SECONDS = 30.0


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """`{"tests/x/test_y.py": seconds}`; empty when the file is missing or unreadable (order then unchanged)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def longest_first(files: list[str], durations: dict[str, float]) -> list[str]:
    """Files sorted by recorded duration, longest first; ties (and unknown files among themselves) keep their
    collection order."""
    position = {f: i for i, f in enumerate(files)}
    return sorted(files, key=lambda f: (-durations.get(f, UNKNOWN_SECONDS), position[f]))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    durations = recorded_durations()
    if not durations:
        return
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    items[:] = [item for f in longest_first(list(by_file), durations) for item in by_file[f]]
