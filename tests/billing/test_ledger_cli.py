"""`maasctl billing ledger`: audited manual entries (reason, actor, idempotent id), show and verify."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maasctl.cli", "billing", "ledger", f"--ledger-url={url}", *args],
                          capture_output=True, text=True, timeout=60, check=False, env={
                              "USER": "ops-alice", "PATH": "/usr/bin:/bin",
                              **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})  # this checkout's code


def test_credit_adjust_show_verify(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    t = ["--tenant", "gw/ten-helix"]
    first = cli("credit", *t, "--amount", "25.00", "--reason", "welcome credit", "--id", "welcome", url=url)
    assert first.returncode == 0, first.stderr
    assert "credit:welcome recorded; balance of gw/ten-helix: 25.000000" in first.stdout
    again = cli("credit", *t, "--amount", "25.00", "--reason", "welcome credit", "--id", "welcome", url=url)
    assert "already recorded; balance of gw/ten-helix: 25.000000" in again.stdout
    other = cli("credit", *t, "--amount", "30", "--reason", "typo", "--id", "welcome", url=url)
    assert other.returncode == 1 and "already used for a different entry" in other.stderr
    fix = cli("adjust", *t, "--amount", "-2.5", "--reason", "goodwill reversed", "--id", "fix-1",
              "--actor", "ops-bob", url=url)
    assert fix.returncode == 0 and "balance of gw/ten-helix: 22.500000" in fix.stdout
    bad = cli("credit", *t, "--amount", "1.5e3", "--reason", "x", "--id", "x", url=url)
    assert bad.returncode == 2 and "refused" in bad.stderr
    blank = cli("credit", *t, "--amount", "1", "--reason", "  ", "--id", "y", url=url)
    assert blank.returncode == 2 and "reason" in blank.stderr
    missing = cli("credit", *t, "--amount", "1", "--id", "z", url=url)
    assert missing.returncode == 2 and "--reason" in missing.stderr
    table = cli("show", *t, url=url)
    assert "balance 22.500000" in table.stdout and "goodwill reversed, by ops-bob" in table.stdout
    assert "welcome credit, by ops-alice" in table.stdout
    shown = json.loads(cli("show", *t, "-o", "json", url=url).stdout)
    assert shown["balance"] == "22.500000"
    assert [(e["key"], e["amount"], e["actor"]) for e in shown["entries"]] == [
        ("adjustment:fix-1", "-2.500000", "ops-bob"), ("credit:welcome", "25.000000", "ops-alice")]
    verify = cli("verify", url=url)
    assert verify.returncode == 0 and "the ledger balances" in verify.stdout


@pytest.mark.parametrize("amount", ["25.00\n", "25.00\r\n", " 25", "25 ", "\u0663", "+1", "1e3", "1.", ".5",
                                    "1" * 25])
def test_manual_entries_refuse_what_admission_refuses(tmp_path: Path, amount: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    t = ["--tenant", "gw/ten-helix", "--reason", "r"]
    for n, (command, text) in enumerate((("credit", amount), ("adjust", amount), ("adjust", "-" + amount))):
        out = cli(command, *t, f"--amount={text}", "--id", f"e{n}", url=url)
        assert out.returncode == 2 and "refused" in out.stderr, (command, text, out.stdout, out.stderr)
    shown = json.loads(cli("show", "--tenant", "gw/ten-helix", "-o", "json", url=url).stdout)
    assert shown["entries"] == [] and Decimal(shown["balance"]) == 0
    assert stat.S_IMODE((tmp_path / "ledger.db").stat().st_mode) == 0o600
