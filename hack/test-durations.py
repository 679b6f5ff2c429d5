#!/usr/bin/env python3
"""Refresh tests/durations.json (seconds per test file, used by tests/schedule.py to hand the longest files to
the workers first) from a JUnit report of a whole run: `hack/test.sh` writes `.local/test-results.xml`.

    .venv/bin/python hack/test-durations.py .local/test-results.xml > tests/durations.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_file(classname: str) -> str | None:
    """`tests.console.test_x.TestY` -> `tests/console/test_x.py` (the longest prefix that is a file)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / candidate).is_file():
            return candidate.as_posix()
    return None


def main(report: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        path = test_file(case.get("classname", ""))
        if path is not None:
            seconds[path] += float(case.get("time", "0") or 0)
    json.dump({p: round(s, 1) for p, s in sorted(seconds.items(), key=lambda kv: -kv[1])}, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
