"""`E2E_NO_SKIPS=1` (CI): a journey that skips fails the run, with its reason; otherwise a skip stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_probe(tmp_path: Path, no_skips: bool) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "conftest.py").write_text("from e2e.conftest import pytest_runtest_makereport  # noqa: F401\n")
    (probe / "test_probe.py").write_text(
        "import pytest\n\n"
        "def test_runs():\n    pass\n\n"
        "def test_cannot_run_here():\n"
        "    pytest.skip('lacks the test model request log (E2E_MODEL_REQUEST_LOG_URL)')\n")
    env = {k: v for k, v in os.environ.items() if k != "E2E_NO_SKIPS"}
    if no_skips:
        env["E2E_NO_SKIPS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src")])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(probe),
                           str(probe)], capture_output=True, text=True, env=env, cwd=probe, timeout=120)


def test_a_skip_fails_the_run_when_every_journey_must_run(tmp_path: Path) -> None:
    proc = run_probe(tmp_path, no_skips=True)
    assert proc.returncode == 1, proc.stdout
    assert "1 failed, 1 passed" in proc.stdout
    assert "skipped in a run where every journey must run (E2E_NO_SKIPS=1)" in proc.stdout
    assert "E2E_MODEL_REQUEST_LOG_URL" in proc.stdout


def test_otherwise_a_skip_is_reported_as_a_skip(tmp_path: Path) -> None:
    proc = run_probe(tmp_path, no_skips=False)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 1 skipped" in proc.stdout
