"""Rater soak (issue 32): `maasctl dev` under steady traffic for `--minutes`, the rater's lag over time.

Starts `maasctl dev` as its own process on free ports (the whole product: control plane, controller, maas-api
on SQLite, the gateway, the billing operator with its ledger and rater, the sample resources), with the billing
operator's /readyz and /metrics on a port of its own. Mints an API key for alice (subscription `premium`,
organization `acme`, the sample TenantAccount `ten-acme`) and sends `--rate` chat completions a second to the
sample external model through the gateway, steadily, for `--minutes`. Every `--every` seconds it prints one
row: requests sent and answered 200 (others by status), the usage records maas-api holds (its SQLite file,
read-only), what the rater reports on /metrics (records rated, records behind its cursor, age of the oldest
unrated record, seconds since it last made progress) and /readyz. The soak holds if "behind" and "oldest"
stay bounded (a pass every `--rate-interval-seconds`, 2 s by default) and /readyz stays 200 to the end.

    .venv/bin/python benchmarks/rater_soak_bench.py [--minutes 30] [--rate 0.4] [--every 60]

The sample Plan `basic` of `ten-acme` allows 30 requests a minute, so the default rate (24 a minute) is all
served; a higher rate shows 429s from the Plan, which are metered and rated too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from maasctl.testenv.controlplane import free_port  # noqa: E402

METRICS = ("maasctl_billing_rater_records_behind", "maasctl_billing_rater_oldest_unrated_seconds",
           "maasctl_billing_rater_seconds_since_progress")


def scrape(text: str) -> dict[str, float]:
    """The rater's gauges and its rated-records counter (all results summed) from a /metrics page."""
    out = {name: 0.0 for name in (*METRICS, "rated")}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if not match:
            continue
        name, value = match.group(1), float(match.group(3))
        if name in METRICS:
            out[name] = value
        elif name == "maasctl_billing_rated_records_total":
            out["rated"] += value
    return out


def usage_records(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM usage_records").fetchone()[0])
    except sqlite3.Error:
        return -1


async def wait_banner(proc: subprocess.Popen[bytes], log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"maasctl dev exited ({proc.returncode}); see {log}")
        if b"maasctl dev is running" in log.read_bytes():
            return
        await asyncio.sleep(1)
    raise SystemExit(f"maasctl dev did not start within {timeout} s; see {log}")


def tokens(directory: Path) -> dict[str, str]:
    out = {}
    for line in (directory / "tokens.env").read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        out[name] = value
    return out


async def traffic(gateway: str, key: str, rate: float, until: float, counts: dict[str, int]) -> None:
    """Open-loop: one request every 1/rate seconds, each in its own task, whatever the answers take."""
    url = f"{gateway}/llm/gpt-x/v1/chat/completions"
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "soak"}], "max_tokens": 16}
    async with httpx.AsyncClient(timeout=30) as http:
        async def one() -> None:
            try:
                resp = await http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
                status = str(resp.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            counts[status] = counts.get(status, 0) + 1

        tasks: set[asyncio.Task[None]] = set()
        start = time.monotonic()
        i = 0
        while (now := time.monotonic()) < until:
            due = start + i / rate
            if due > now:
                await asyncio.sleep(due - now)
                continue
            task = asyncio.create_task(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            counts["sent"] = counts.get("sent", 0) + 1
            i += 1
        if tasks:
            await asyncio.wait(tasks, timeout=30)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=0.4, help="requests per second")
    ap.add_argument("--every", type=float, default=60, help="seconds between rows")
    args = ap.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="rater-soak-"))
    gw, api, console, probe = free_port(), free_port(), free_port(), free_port()
    log = directory / "dev.log"
    argv = [str(ROOT / ".venv/bin/maasctl"), "dev", "--dir", str(directory), "--gateway-port", str(gw),
            "--api-port", str(api), "--console-port", str(console), "--billing-probe-address",
            f"127.0.0.1:{probe}", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"]
    proc = start(argv, log)
    try:
        started = time.monotonic()
        await wait_banner(proc, log)
        print(f"maasctl dev up in {time.monotonic() - started:.0f} s (dir {directory}); load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        alice = tokens(directory)["ALICE_TOKEN"]
        async with httpx.AsyncClient(timeout=30) as http:
            resp = await http.post(f"http://127.0.0.1:{api}/v1/api-keys", json={"name": "soak"},
                                   headers={"Authorization": f"Bearer {alice}"})
            resp.raise_for_status()
            key = resp.json()["key"]
            counts: dict[str, int] = {}
            until = time.monotonic() + args.minutes * 60
            load = asyncio.create_task(traffic(f"http://127.0.0.1:{gw}", key, args.rate, until, counts))
            print("| minute | sent | 200 | other | records in maas-api | rated | behind | oldest unrated s | "
                  "since progress s | /readyz | load |")
            print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|")
            worst = {name: 0.0 for name in METRICS}
            not_ready = 0
            t0 = time.monotonic()
            while not load.done():
                await asyncio.wait({load}, timeout=args.every)
                try:
                    metrics = scrape((await http.get(f"http://127.0.0.1:{probe}/metrics")).text)
                    ready = await http.get(f"http://127.0.0.1:{probe}/readyz")
                    ready_text = str(ready.status_code)
                except httpx.HTTPError as exc:
                    metrics, ready_text = scrape(""), type(exc).__name__
                if ready_text != "200":
                    not_ready += 1
                for name in METRICS:
                    worst[name] = max(worst[name], metrics[name])
                other = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k not in ("sent", "200"))
                print(f"| {(time.monotonic() - t0) / 60:.1f} | {counts.get('sent', 0)} | {counts.get('200', 0)} | "
                      f"{other or '-'} | {usage_records(directory / 'maas-api.db')} | {metrics['rated']:.0f} | "
                      f"{metrics[METRICS[0]]:.0f} | {metrics[METRICS[1]]:.1f} | {metrics[METRICS[2]]:.1f} | "
                      f"{ready_text} | {os.getloadavg()[0]:.2f} |", flush=True)
            await load
            await asyncio.sleep(10)  # the last records: flushed by the gateway, then rated
            final = scrape((await http.get(f"http://127.0.0.1:{probe}/metrics")).text)
        print(f"\nafter the traffic stopped (+10 s): records in maas-api {usage_records(directory / 'maas-api.db')}, "
              f"rated {final['rated']:.0f}, behind {final[METRICS[0]]:.0f}; worst during the soak: behind "
              f"{worst[METRICS[0]]:.0f}, oldest unrated {worst[METRICS[1]]:.1f} s, since progress "
              f"{worst[METRICS[2]]:.1f} s; /readyz not 200 in {not_ready} rows")
        return 0
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
