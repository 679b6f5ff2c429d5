"""`maasctl usage report/export` against the real app (in-process), and token resolution."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import httpx
import pytest

from maasctl import usage_cli

from .test_usage import Env, env, ingest_all  # noqa: F401  (fixture)
from .usage_data import make_records


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    usage_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


async def run(env: Env, argv: list[str]) -> tuple[int, str]:  # noqa: F811
    out = io.StringIO()
    transport = env.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    code = await usage_cli.dispatch(parse(argv), out=out, transport=transport)
    return code, out.getvalue()


async def test_report_table_json_and_csv_export(env: Env) -> None:  # noqa: F811
    records = make_records(120)
    await ingest_all(env, records)
    base = ["--maas-api-url", "http://maas-api", "--token", "admin-token"]
    code, text = await run(env, ["usage", "report", *base, "--range", "90d", "--json"])
    assert code == 0
    report = json.loads(text)
    code, table = await run(env, ["usage", "report", *base, "--range", "90d"])
    lines = table.splitlines()
    assert code == 0 and lines[1].split() == ["USERNAME", "SUBSCRIPTION", "TOTAL", "INPUT", "CACHED", "OUTPUT",
                                              "REASONING"]
    assert len(lines) == 3 + len(report["data"]) and lines[-1].startswith("TOTAL")
    assert f"{report['totals']['totalTokens']:,}" in lines[-1]
    code, text = await run(env, ["usage", "export", *base, "--group-by", "user", "--by", "month", "--range", "90d"])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert code == 0 and sum(int(r["total_tokens"]) for r in rows) == report["totals"]["totalTokens"]
    code, _ = await run(env, ["usage", "report", "--maas-api-url", "http://maas-api", "--token", "alice-token"])
    assert code == 1


def test_token_from_environment_then_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "users: [{name: other, user: {token: wrong}}, {name: u, user: {token: from-kubeconfig}}]\n"
    )
    args = parse(["usage", "report", "--kubeconfig", str(kubeconfig)])
    monkeypatch.delenv("MAASCTL_TOKEN", raising=False)
    assert usage_cli.resolve_token(args) == "from-kubeconfig"
    monkeypatch.setenv("MAASCTL_TOKEN", "from-env")
    assert usage_cli.resolve_token(args) == "from-env"
    assert usage_cli.resolve_token(parse(["usage", "report", "--token", "flag"])) == "flag"
    monkeypatch.delenv("MAASCTL_TOKEN")
    with pytest.raises(usage_cli.UsageCliError):
        usage_cli.resolve_token(parse(["usage", "report", "--kubeconfig", str(tmp_path / "missing")]))
