"""The file order handed to the xdist workers (tests/schedule.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.schedule import STACKS, UNKNOWN_SECONDS, file_group, longest_first, recorded_durations, stacks_done

pytest_plugins = ["pytester"]


def test_longest_files_first_ties_and_unknown_files_keep_collection_order() -> None:
    files = ["tests/a.py", "tests/b.py", "tests/c.py", "e2e/d.py", "tests/new.py"]
    durations = {"tests/a.py": 5.0, "tests/b.py": 300.0, "tests/c.py": 5.0, "e2e/d.py": 90.0}
    assert longest_first(files, durations) == ["tests/b.py", "e2e/d.py", "tests/new.py", "tests/a.py", "tests/c.py"]
    assert UNKNOWN_SECONDS == 30.0  # the new file sits between the 90 s and the 5 s files


def test_files_come_grouped_by_the_first_stack_they_use_then_longest_first() -> None:
    files = ["tests/unit.py", "tests/console/a.py", "e2e/j.py", "tests/security/s.py", "tests/console/b.py"]
    durations = {"tests/unit.py": 500.0, "tests/console/a.py": 10.0, "e2e/j.py": 20.0, "tests/security/s.py": 90.0,
                 "tests/console/b.py": 60.0}
    groups = {"tests/unit.py": file_group([set(), set()]), "tests/console/a.py": file_group([{1}]),
              "e2e/j.py": file_group([{0}, set()]), "tests/security/s.py": file_group([{0}, {0, 1}]),
              "tests/console/b.py": file_group([set(), {1}])}
    assert groups["tests/unit.py"] == len(STACKS) and groups["tests/security/s.py"] == 0
    assert longest_first(files, durations, groups) == [
        "tests/security/s.py", "e2e/j.py", "tests/console/b.py", "tests/console/a.py", "tests/unit.py"]


def test_a_stack_is_done_once_the_next_test_is_of_a_later_group() -> None:
    assert stacks_done({0}, next_group=0) == []  # the next file may still use it
    assert stacks_done({0}, next_group=1) == [0]
    assert stacks_done({0, 1}, next_group=1) == [0]  # a file of group 0 that also used the console's stack
    assert stacks_done({0, 1}, next_group=len(STACKS)) == [0, 1]
    assert stacks_done(set(), next_group=len(STACKS)) == []


STACK_CONFTEST = '''
import pathlib
import pytest

EVENTS = pathlib.Path(__file__).with_name("events.log")


def events():
    return EVENTS.read_text().split() if EVENTS.exists() else []


@pytest.fixture(scope="session")
async def stack():
    with EVENTS.open("a") as log:
        log.write("start\\n")
    yield
    with EVENTS.open("a") as log:
        log.write("stop\\n")
'''


def test_a_worker_stops_a_stack_when_no_test_left_uses_it(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Through pytest itself (and pytest-asyncio, like the real stacks): the stack is stopped between the last test
    that uses it and the next, once; before, it ran until the session ended."""
    pytester.makeconftest(STACK_CONFTEST)
    pytester.makepyfile(
        test_unit="from conftest import events\n\n\ndef test_after_the_stack():\n"
                  "    assert events() == ['start', 'stop']\n",
        test_uses_the_stack="async def test_one(stack):\n    pass\n\n\nasync def test_two(stack):\n    pass\n")
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
                     "asyncio_default_test_loop_scope = session\n")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    result = pytester.runpytest_subprocess("-p", "tests.schedule", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)
    assert (pytester.path / "events.log").read_text().split() == ["start", "stop"]


def test_missing_or_broken_durations_change_nothing(tmp_path: Path) -> None:
    assert recorded_durations(tmp_path / "absent.json") == {}
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert recorded_durations(broken) == {}
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert recorded_durations(listed) == {}
    mixed = tmp_path / "mixed.json"
    mixed.write_text('{"tests/a.py": 2, "tests/b.py": "slow"}')
    assert recorded_durations(mixed) == {"tests/a.py": 2.0}



def test_the_committed_durations_name_existing_files() -> None:
    """tests/durations.json is read (not silently empty) and names test files of this checkout; a renamed file
    only costs its place in the order (it counts as unknown), so this checks that the estimate is refreshed."""
    durations = recorded_durations()
    assert len(durations) > 100
    root = Path(__file__).resolve().parent.parent
    missing = [f for f in durations if not (root / f).is_file()]
    assert len(missing) <= len(durations) // 10, missing
