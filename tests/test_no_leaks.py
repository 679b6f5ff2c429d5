"""The leak guard itself can fail: a test that leaves a task or a process behind is reported."""

from __future__ import annotations

import pathlib

import pytest

pytest_plugins = ["pytester"]

LEAKY = '''
import asyncio, subprocess, sys

async def test_leaves_a_task():
    asyncio.get_running_loop().create_task(asyncio.sleep(3600), name="forgotten")

async def test_leaves_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])  # outlives the check, not the run

async def test_cleans_up():
    task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
    task.cancel()
'''


def test_leaked_tasks_and_processes_fail_the_test(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest("from tests.conftest import no_leaks  # noqa: F401\n")
    pytester.makepyfile(test_leaky=LEAKY)
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
                     "asyncio_default_test_loop_scope = session\n")
    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", str(root))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(["*left asyncio tasks running*forgotten*", "*left child processes running*"])
