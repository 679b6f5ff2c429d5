"""Longest files first: the order in which the two xdist workers are handed test files (hooked in by
tests/conftest.py, so it orders the whole run's items, e2e/ included).

`--dist loadfile` hands out whole files in collection order (with `--no-loadscope-reorder`; xdist's default
orders them by test count, which puts the few-test, minute-long e2e and browser files last, so the run ended
with one worker busy for minutes while the other had nothing left). Sorting files by their recorded duration,
longest first, is the classic longest-processing-time rule: the tail is at most about one short file.

The durations are a committed estimate (`tests/durations.json`, seconds per file), refreshed from a run's JUnit
report by `hack/test-durations.py`; a file it does not know yet counts as `UNKNOWN_SECONDS`. Tests keep their
order within a file.

Stacks: two session fixtures start a whole stack each (`STACKS`: the journeys' local stack, the console's), and a
worker used to keep both running, mostly idle, until the session ended. So the files come in groups, by the first
stack they use (the journeys' stack, then the console's, then none), each group longest first; and once a worker's
next test belongs to a later group, no file that uses a stack of an earlier group can reach it any more (xdist
hands the files out in this order), so the worker stops that stack there (`pytest_runtest_teardown`). Should a
stack be asked for again, pytest starts it anew: a slower run, never a wrong one.

A plugin of the whole run (the root `conftest.py`), so that its hooks see `tests/` and `e2e/` alike.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_SECONDS = 30.0
# (fixture name, the directory of the conftest defining it; "" for a plugin of the whole run)
STACKS: tuple[tuple[str, str], ...] = (("stack", ""), ("world", "tests/console"))
_GROUPS = pytest.StashKey[dict[str, int]]()  # file -> its group: the index in STACKS of the first stack it uses


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """`{"tests/x/test_y.py": seconds}`; empty when the file is missing or unreadable (order then unchanged)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def longest_first(files: list[str], durations: dict[str, float], groups: dict[str, int] | None = None) -> list[str]:
    """Files sorted by group (none given: all one group), then by recorded duration, longest first; ties (and
    unknown files among themselves) keep their collection order."""
    position = {f: i for i, f in enumerate(files)}
    group = groups or {}
    return sorted(files, key=lambda f: (group.get(f, 0), -durations.get(f, UNKNOWN_SECONDS), position[f]))


def stacks_used(item: pytest.Item) -> set[int]:
    """The indexes in STACKS of the stack fixtures this test uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixture closure of a test function
    definitions = info.name2fixturedefs if info is not None else {}
    return {i for i, (name, baseid) in enumerate(STACKS)
            if name in definitions and definitions[name][-1].baseid == baseid}


def file_group(uses: Iterable[set[int]]) -> int:
    """A file's group: the first stack any of its tests uses; len(STACKS) for a file that uses none."""
    return min((i for used in uses for i in used), default=len(STACKS))


def stacks_done(used: set[int], next_group: int) -> list[int]:
    """The stacks a test used that no later test of its worker can use: those of groups before the next test's."""
    return sorted(i for i in used if i < next_group)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(_file(item), []).append(item)
    groups = {f: file_group(stacks_used(item) for item in tests) for f, tests in by_file.items()}
    config.stash[_GROUPS] = groups
    items[:] = [item for f in longest_first(list(by_file), recorded_durations(), groups) for item in by_file[f]]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield
    if nextitem is None:  # the session's own teardown stops what is left
        return
    groups = item.config.stash.get(_GROUPS, {})
    next_group = groups.get(_file(nextitem), 0)  # a file collected after the ordering: stop nothing
    for i in stacks_done(stacks_used(item), next_group):
        fixturedef = item._fixtureinfo.name2fixturedefs[STACKS[i][0]][-1]  # type: ignore[attr-defined]
        fixturedef.finish(item._request)  # type: ignore[attr-defined]  # its teardown now; pytest forgets it
