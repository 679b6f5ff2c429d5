"""The file order handed to the xdist workers (tests/schedule.py)."""

from __future__ import annotations

from pathlib import Path

from tests.schedule import UNKNOWN_SECONDS, longest_first, recorded_durations


def test_longest_files_first_ties_and_unknown_files_keep_collection_order() -> None:
    files = ["tests/a.py", "tests/b.py", "tests/c.py", "e2e/d.py", "tests/new.py"]
    durations = {"tests/a.py": 5.0, "tests/b.py": 300.0, "tests/c.py": 5.0, "e2e/d.py": 90.0}
    assert longest_first(files, durations) == ["tests/b.py", "e2e/d.py", "tests/new.py", "tests/a.py", "tests/c.py"]
    assert UNKNOWN_SECONDS == 30.0  # the new file sits between the 90 s and the 5 s files


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
