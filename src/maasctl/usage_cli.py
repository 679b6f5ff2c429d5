"""`maasctl usage report` and `maasctl usage export`: usage reports of maas-api from the command line.

The bearer token comes from `--token`, else `$MAASCTL_TOKEN`, else the current kubeconfig user (`token` or
`tokenFile`; `--kubeconfig`, `$KUBECONFIG` or ~/.kube/config). Reports print a table (JSON with `--json`);
exports stream CSV to stdout unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

if TYPE_CHECKING:
    import httpx  # imported by `dispatch`: `maasctl run` registers this command and should not pay for httpx

RANGES = ("1d", "7d", "30d", "90d", "1y")
COLUMNS = (
    ("username", "USERNAME"),
    ("subscription", "SUBSCRIPTION"),
    ("totalTokens", "TOTAL"),
    ("inputTokens", "INPUT"),
    ("cachedTokens", "CACHED"),
    ("outputTokens", "OUTPUT"),
    ("reasoningTokens", "REASONING"),
)


class UsageCliError(Exception):
    """A problem to print on stderr (exit code 1)."""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `usage report` and `usage export` to the CLI's subparsers."""
    usage: argparse.ArgumentParser = subparsers.add_parser("usage", help="usage reports and CSV exports from maas-api")
    sub = usage.add_subparsers(dest="usage_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--maas-api-url", default=os.environ.get("MAASCTL_MAAS_API_URL", "http://127.0.0.1:8080"),
                       help="maas-api base URL (default: $MAASCTL_MAAS_API_URL or http://127.0.0.1:8080)")
        p.add_argument("--token", default=None, help="bearer token (default: $MAASCTL_TOKEN, then kubeconfig)")
        p.add_argument("--kubeconfig", default=None, help="kubeconfig to take the user's token from")
        p.add_argument("--ca-file", default=None, help="CA bundle for an https maas-api URL")
        p.add_argument("--range", choices=RANGES, default=None, help="last 1d/7d/30d/90d/1y (default 7d)")
        p.add_argument("--from", dest="start", default=None, help="start time (ISO 8601, UTC if no offset)")
        p.add_argument("--to", dest="end", default=None, help="end time, exclusive (ISO 8601)")
        p.add_argument("--subscription", default=None, help="only this subscription (namespace/name)")
        p.add_argument("--user", default=None, help="username search (case-insensitive substring)")

    report = sub.add_parser("report", help="tokens per user and subscription")
    common(report)
    report.add_argument("--json", action="store_true", help="print the JSON document instead of a table")
    export = sub.add_parser("export", help="CSV to stdout")
    common(export)
    export.add_argument("--group-by", choices=("subscription", "user", "key", "model"), default="user")
    export.add_argument("--by", choices=("day", "month"), default="day", help="time grouping")
    return usage


def kubeconfig_token(path: str | None) -> str | None:
    """The bearer token of the current context's user in a kubeconfig, if it has one."""
    candidates = [path] if path else [*os.environ.get("KUBECONFIG", "").split(os.pathsep), "~/.kube/config"]
    for cand in candidates:
        if not cand:
            continue
        file = Path(cand).expanduser()
        if not file.is_file():
            continue
        cfg = yaml.safe_load(file.read_text()) or {}
        contexts = {c.get("name"): c.get("context") or {} for c in cfg.get("contexts") or []}
        user_name = contexts.get(cfg.get("current-context"), {}).get("user")
        for u in cfg.get("users") or []:
            if u.get("name") != user_name:
                continue
            user = u.get("user") or {}
            if user.get("token"):
                return str(user["token"])
            if user.get("tokenFile"):
                return Path(user["tokenFile"]).expanduser().read_text().strip()
        return None
    return None


def resolve_token(args: argparse.Namespace) -> str:
    token = args.token or os.environ.get("MAASCTL_TOKEN") or kubeconfig_token(args.kubeconfig)
    if not token:
        raise UsageCliError("no token: pass --token, set MAASCTL_TOKEN or use a kubeconfig user with a token")
    return token


def _params(args: argparse.Namespace) -> dict[str, str]:
    params = {"range": args.range, "from": args.start, "to": args.end, "subscription": args.subscription,
              "user": args.user}
    if args.usage_command == "export":
        params |= {"groupBy": args.group_by, "by": args.by}
    return {k: v for k, v in params.items() if v is not None}


def _error(response: httpx.Response, body: bytes) -> UsageCliError:
    try:
        err = json.loads(body)["error"]
        return UsageCliError(f"maas-api answered {response.status_code} {err['code']}: {err['message']}")
    except (ValueError, KeyError, TypeError):
        return UsageCliError(f"maas-api answered {response.status_code}")


def render_table(report: dict[str, Any], out: TextIO) -> None:
    """A plain aligned table with thousands separators and a TOTAL line."""
    rows = [[str(r[key]) if i < 2 else f"{int(r[key]):,}" for i, (key, _) in enumerate(COLUMNS)]
            for r in report.get("data", [])]
    totals = report.get("totals") or {}
    footer = ["TOTAL", "", *(f"{int(totals.get(key, 0)):,}" for key, _ in COLUMNS[2:])]
    header = [title for _, title in COLUMNS]
    widths = [max(len(x[i]) for x in [header, *rows, footer]) for i in range(len(COLUMNS))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                strict=True)))

    out.write(f"Usage from {report.get('from')} to {report.get('to')} (UTC)\n")
    out.write(line(header).rstrip() + "\n")
    for r in rows:
        out.write(line(r).rstrip() + "\n")
    out.write(line(footer).rstrip() + "\n")
    if report.get("hasMore"):
        out.write("(more rows exist: narrow the range, subscription or user)\n")


async def dispatch(args: argparse.Namespace, out: TextIO | None = None,
                   transport: httpx.AsyncBaseTransport | None = None) -> int:
    """Run `maasctl usage <command>`; returns the exit code."""
    import httpx

    out = out or sys.stdout
    try:
        token = resolve_token(args)
        verify: Any = args.ca_file or True
        async with httpx.AsyncClient(base_url=args.maas_api_url.rstrip("/"), verify=verify, transport=transport,
                                     headers={"Authorization": f"Bearer {token}"}, timeout=60.0) as http:
            if args.usage_command == "report":
                r = await http.get("/v1/usage/report", params=_params(args))
                if r.status_code != 200:
                    raise _error(r, r.content)
                if args.json:
                    out.write(json.dumps(r.json(), indent=2) + "\n")
                else:
                    render_table(r.json(), out)
                return 0
            async with http.stream("GET", "/v1/usage/export", params=_params(args)) as r:
                if r.status_code != 200:
                    raise _error(r, await r.aread())
                binary = getattr(out, "buffer", None)
                async for chunk in r.aiter_bytes():
                    if binary is not None:
                        binary.write(chunk)
                    else:
                        out.write(chunk.decode())
                out.flush()
            return 0
    except (UsageCliError, httpx.HTTPError, OSError) as exc:
        print(f"maasctl usage: {exc}", file=sys.stderr)
        return 1
