"""`apply_stream_when_served` (hack/deploy.sh, used by hack/install-examples.sh): the API server's "kind not
available yet" 503 is applied again, with a bound; any other failure fails at once. A stand-in kubectl answers
as the API server did in the failed `hack/dev.sh` starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.install.manifests import REPO

LAG = ("Error from server (ServiceUnavailable): error when creating \"STDIN\": Resource kind "
       "maas.opendatahub.io/v1alpha1, Kind=MaaSSubscription not found. There can be a delay between when "
       "CustomResourceDefinitions are created and when they are available.")
OTHER_503 = "Error from server (ServiceUnavailable): the server is currently unable to handle the request"
INVALID = "The MaaSSubscription \"free\" is invalid: spec.owner: Required value"

# Fails with the answers in $ANSWERS (one per call, "ok" = succeed), recording each call's stdin.
FAKE_KUBECTL = """#!/usr/bin/env bash
n=$(( $(cat "$CALLS" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$CALLS"
cat > "$STDIN_DIR/$n"
answer=$(sed -n "${n}p" "$ANSWERS")
if [[ -z "$answer" || "$answer" == ok ]]; then echo "maassubscription/free serverside-applied"; exit 0; fi
echo "$answer" >&2
exit 1
"""


def run(tmp_path: Path, answers: list[str]) -> tuple[subprocess.CompletedProcess[str], int, list[str]]:
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE_KUBECTL)
    fake.chmod(0o755)
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    stdin_dir = tmp_path / "stdin"
    stdin_dir.mkdir()
    env = {**os.environ, "KUBECTL": str(fake), "CALLS": str(tmp_path / "calls"), "ANSWERS": str(tmp_path / "answers"),
           "STDIN_DIR": str(stdin_dir)}
    script = f'source "{REPO}/hack/deploy.sh"; apply_stream_when_served'
    proc = subprocess.run(["bash", "-c", script], input="kind: MaaSSubscription\n", capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    calls = int((tmp_path / "calls").read_text()) if (tmp_path / "calls").exists() else 0
    return proc, calls, [(stdin_dir / str(i + 1)).read_text() for i in range(calls)]


@pytest.mark.parametrize("lags", [0, 1, 3])
def test_the_lag_is_applied_again_until_the_kind_is_served(tmp_path: Path, lags: int) -> None:
    proc, calls, inputs = run(tmp_path, [LAG] * lags + ["ok"])
    assert proc.returncode == 0, proc.stderr
    assert calls == lags + 1 and set(inputs) == {"kind: MaaSSubscription\n"}  # the same objects each time
    assert "serverside-applied" in proc.stdout
    assert proc.stderr.count("applying again") == lags


@pytest.mark.parametrize("answer", [OTHER_503, INVALID, "error: You must be logged in to the server (Unauthorized)"])
def test_any_other_failure_fails_at_once(tmp_path: Path, answer: str) -> None:
    proc, calls, _ = run(tmp_path, [answer, "ok"])
    assert proc.returncode == 1 and calls == 1
    assert answer in proc.stderr


def test_the_lag_fails_after_thirty_tries(tmp_path: Path) -> None:
    proc, calls, _ = run(tmp_path, [LAG] * 40)
    assert proc.returncode == 1 and calls == 30
    assert "There can be a delay" in proc.stderr
