"""`maasctl billing ledger`: audited manual entries (reason, actor, idempotent id) for TenantAccounts that exist
(checked on the real control plane), show and verify."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from maasctl.cli import main
from maasctl.testenv import ControlPlane

from .conftest import Billing


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maasctl.cli", "billing", "ledger", f"--ledger-url={url}", *args],
                          capture_output=True, text=True, timeout=60, check=False, env={
                              "USER": "ops-alice", "PATH": "/usr/bin:/bin",
                              **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})  # this checkout's code


async def tenant_account(billing: Billing, namespace: str, name: str) -> None:
    await billing.create({"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "TenantAccount",
                          "metadata": {"name": name, "namespace": namespace},
                          "spec": {"displayName": name, "planRef": {"name": "none"}, "billingMode": "Prepaid"}})


@pytest.mark.integration
async def test_credit_adjust_show_verify(tmp_path: Path, billing: Billing, namespace: str,
                                         billing_cluster: ControlPlane) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    await tenant_account(billing, namespace, "ten-helix")
    tenant = f"{namespace}/ten-helix"
    t = ["--tenant", tenant, f"--kubeconfig={billing_cluster.kubeconfig}"]
    first = cli("credit", *t, "--amount", "25.00", "--reason", "welcome credit", "--id", "welcome", url=url)
    assert first.returncode == 0, first.stderr
    assert f"credit:welcome recorded; balance of {tenant}: 25.000000" in first.stdout
    again = cli("credit", *t, "--amount", "25.00", "--reason", "welcome credit", "--id", "welcome", url=url)
    assert f"already recorded; balance of {tenant}: 25.000000" in again.stdout
    other = cli("credit", *t, "--amount", "30", "--reason", "typo", "--id", "welcome", url=url)
    assert other.returncode == 1 and "already used for a different entry" in other.stderr
    fix = cli("adjust", *t, "--amount", "-2.5", "--reason", "goodwill reversed", "--id", "fix-1",
              "--actor", "ops-bob", url=url)
    assert fix.returncode == 0 and f"balance of {tenant}: 22.500000" in fix.stdout
    bad = cli("credit", *t, "--amount", "1.5e3", "--reason", "x", "--id", "x", url=url)
    assert bad.returncode == 2 and "refused" in bad.stderr
    blank = cli("credit", *t, "--amount", "1", "--reason", "  ", "--id", "y", url=url)
    assert blank.returncode == 2 and "reason" in blank.stderr
    missing = cli("credit", *t, "--amount", "1", "--id", "z", url=url)
    assert missing.returncode == 2 and "--reason" in missing.stderr
    t = ["--tenant", tenant]
    table = cli("show", *t, url=url)
    assert "balance 22.500000" in table.stdout and "goodwill reversed, by ops-bob" in table.stdout
    assert "welcome credit, by ops-alice" in table.stdout
    shown = json.loads(cli("show", *t, "-o", "json", url=url).stdout)
    assert shown["balance"] == "22.500000"
    assert [(e["key"], e["amount"], e["actor"]) for e in shown["entries"]] == [
        ("adjustment:fix-1", "-2.500000", "ops-bob"), ("credit:welcome", "25.000000", "ops-alice")]
    verify = cli("verify", url=url)
    assert verify.returncode == 0 and "the ledger balances" in verify.stdout


@pytest.mark.integration
async def test_a_manual_entry_for_a_tenant_that_does_not_exist_is_refused(
        tmp_path: Path, billing: Billing, namespace: str, billing_cluster: ControlPlane) -> None:
    """A mistyped tenant would get money nobody owns, in an append-only ledger: refused, with what exists."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    await tenant_account(billing, namespace, "ten-real")
    kubeconfig = f"--kubeconfig={billing_cluster.kubeconfig}"
    for command, amount in (("credit", "5"), ("adjust", "-1")):
        for tenant in (f"{namespace}/ten-typo", f"{namespace}-nope/ten-real"):
            out = cli(command, "--tenant", tenant, "--amount", amount, "--reason", "r", "--id", f"{command}-x",
                      kubeconfig, url=url)
            assert out.returncode == 2, (out.stdout, out.stderr)
            assert f"refused: TenantAccount {tenant} does not exist" in out.stderr
            assert "kubectl get tenantaccounts -n" in out.stderr and "nothing recorded" in out.stderr
        malformed = cli(command, "--tenant", "ten-real", "--amount", amount, "--reason", "r", "--id", "m",
                        kubeconfig, url=url)
        assert malformed.returncode == 2 and "namespace/name" in malformed.stderr
    unreachable = cli("credit", "--tenant", f"{namespace}/ten-real", "--amount", "5", "--reason", "r", "--id", "u",
                      f"--kubeconfig={tmp_path / 'missing.kubeconfig'}", url=url)
    assert unreachable.returncode == 2 and "cannot check that TenantAccount" in unreachable.stderr
    for tenant in (f"{namespace}/ten-typo", f"{namespace}/ten-real"):
        shown = json.loads(cli("show", "--tenant", tenant, "-o", "json", url=url).stdout)
        assert shown["entries"] == [] and Decimal(shown["balance"]) == 0  # nothing recorded anywhere
    ok = cli("credit", "--tenant", f"{namespace}/ten-real", "--amount", "5", "--reason", "r", "--id", "ok",
             kubeconfig, url=url)
    assert ok.returncode == 0 and "balance of" in ok.stdout, ok.stderr


@pytest.mark.parametrize("amount", ["25.00\n", "25.00\r\n", " 25", "25 ", "\u0663", "+1", "1e3", "1.", ".5",
                                    "1" * 25])
def test_manual_entries_refuse_what_admission_refuses(tmp_path: Path, amount: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """In process (the command's own `main`, as the console script calls it): a process per amount would cost
    ~2 s of start-up each for the same code; `test_credit_adjust_show_verify` runs the real process."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    t = ["--tenant", "gw/ten-helix", "--reason", "r", "--actor", "ops-alice"]
    for n, (command, text) in enumerate((("credit", amount), ("adjust", amount), ("adjust", "-" + amount))):
        code = main(["billing", "ledger", f"--ledger-url={url}", command, *t, f"--amount={text}", "--id", f"e{n}"])
        err = capsys.readouterr().err
        assert code == 2 and "refused" in err, (command, text, err)
    assert main(["billing", "ledger", f"--ledger-url={url}", "show", "--tenant", "gw/ten-helix", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entries"] == [] and Decimal(shown["balance"]) == 0
    assert stat.S_IMODE((tmp_path / "ledger.db").stat().st_mode) == 0o600
