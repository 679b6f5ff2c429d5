"""How long a controller leaves changes unserved when its leader stops, in each product's shipped setup (issue 39).

Same objects and stand-ins as ``reference_restart_bench.py`` (300 subscriptions over 3 of 50 ExternalModels, the
benchmark playing the Gateway controller and Kuadrant), a fresh local control plane per round, leader election on
as both products ship it. A leader converges the backlog; then, at the stop (SIGTERM to the leader, and a new
subscription created at the same moment), measured from the stop:

- "until working": the successor's last "starting workers" log line (it holds the lease and works on its cache);
- "a change at the stop": the new subscription Active (polled every 20 ms).

Scenarios:

- ``standby`` (maasctl's install: 2 replicas): a second process runs beside the leader, its caches synced (its
  /readyz answers 200), when the leader stops. ``maasctl-before`` is the code of ``--compare DIR`` (e.g.
  ``git archive <commit> src | tar -x -C /tmp/base``), interleaved.
- ``restart`` (the reference's install: 1 replica with ``--leader-elect``; maasctl's dev overlay): the leader
  stops, and a new process starts once it has exited, as a restarted container does.

The reference needs ``LeaderElectionNamespace`` outside a Pod (in a Pod, controller-runtime reads it from the
service account's files): its build for this benchmark adds ``LeaderElectionNamespace:
os.Getenv("LEADER_ELECTION_NAMESPACE")`` to the manager options of ``cmd/manager/main.go``, then builds as
``reference_restart_bench.py`` says. Two reference processes cannot run on one machine (both bind the webhook
port 9443), so it runs the ``restart`` scenario only, which is also its shipped setup.

    MAASCTL_THIRD_PARTY_CRDS=../shared/crds .venv/bin/python benchmarks/handover_bench.py [--rounds 3] \\
        [--compare /tmp/base/src] [--scenarios standby,restart]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from reference_restart_bench import (
    Controller,
    add_cluster_arguments,
    compile_maasctl,
    converge,
    create,
    prepare,
    remove_work,
    subscription,
    until_active,
)

from maasctl.testenv import ControlPlane

VERSIONS = {"standby": ("maasctl", "maasctl-before"), "restart": ("maasctl", "reference")}


async def ready(ctl: Controller, limit: float = 60.0) -> bool:
    """True once the process's /readyz answers 200 (its informers synced), False after `limit`."""
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            try:
                if (await http.get(f"http://127.0.0.1:{ctl.probe}/readyz")).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    return False


async def one(version: str, scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"handover-{version}-"))
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    reference = Path(args.reference).expanduser()
    pythonpath = args.compare if version == "maasctl-before" else None
    kind = "reference" if version == "reference" else "maasctl"

    def controller() -> Controller:
        return Controller(kind, cp.kubeconfig, work, reference, leader_elect=True, pythonpath=pythonpath)

    leader, successor = controller(), controller()
    try:
        with cp.http_client(timeout=60) as http:
            await prepare(kind, args, cp, http, work)
            await leader.start()
            n, converged = await converge(http, leader, args)
            if converged is None:
                raise RuntimeError(f"{version}: {n} of {args.subs} Active; log: {''.join(leader.lines[-10:])}")
            await asyncio.sleep(args.settle)
            if scenario == "standby":
                await successor.start()
                if not await ready(successor):
                    raise RuntimeError(f"{version}: the standby never got ready: {''.join(successor.lines[-10:])}")
                await asyncio.sleep(1.0)
                assert successor.working_at is None, "the standby works while the leader holds the lease"
            stopped = time.monotonic()
            assert leader.proc is not None
            leader.proc.terminate()
            if scenario == "restart":
                await asyncio.to_thread(leader.proc.wait, 30)
                await successor.start()
            await asyncio.to_thread(create, http, [subscription(args.subs, args.models, args.per_sub)])
            active_at = await until_active(http, f"s{args.subs}", args.limit)
            await leader.stop()
            for _ in range(int(args.limit * 10)):  # the reference logs its workers a moment after its status write
                if successor.working_at is not None:
                    break
                await asyncio.sleep(0.1)
            await successor.stop()
            (work / "leader.log").write_text("".join(leader.lines))
            (work / "successor.log").write_text("".join(successor.lines))
            working = successor.working_at - stopped if successor.working_at is not None else None
            return {"version": version, "scenario": scenario, "all_active_s": converged,
                    "until_working_s": working,
                    "change_active_s": active_at - stopped if active_at is not None else None}
    finally:
        for ctl in (leader, successor):
            if ctl.proc is not None and ctl.proc.poll() is None:
                await ctl.stop()
        await asyncio.to_thread(cp.stop)
        remove_work(work, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cluster_arguments(parser)
    parser.add_argument("--compare", default=None, help="PYTHONPATH of maasctl's code before the change")
    parser.add_argument("--scenarios", default="standby,restart")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after all Active before the stop")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds to wait for the new subscription")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_maasctl(args)
    if args.one:
        print(json.dumps(asyncio.run(one(args.one[0], args.one[1], args))), flush=True)
        return
    cells = [(s, v) for s in args.scenarios.split(",") for v in VERSIONS[s]
             if v != "maasctl-before" or args.compare]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {c: [] for c in cells}
    for rnd in range(args.rounds):
        for scenario, version in cells if rnd % 2 == 0 else cells[::-1]:
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--one", version, scenario, *sys.argv[1:]],
                                  capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{scenario} {version} round {rnd + 1} failed:\n{done.stderr[-4000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1]) | {"load": f"{load:.2f}-{os.getloadavg()[0]:.2f}"}
            results[(scenario, version)].append(r)
            print(f"# round {rnd + 1} {json.dumps(r)}", flush=True)
    print("| scenario | version | load per round | successor working after the stop (s) | "
          "a subscription created at the stop: Active after (s) |")
    print("|---|---|---|---|---|")
    for (scenario, version), rs in results.items():
        def each(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals = [r[key] for r in rs]
            nums = [v for v in vals if v is not None]
            shown = " / ".join("-" if v is None else f"{v:.2f}" for v in vals)
            return f"{shown} (median {statistics.median(nums):.2f})" if nums else shown
        print(f"| {scenario} | {version} | {', '.join(r['load'] for r in rs)} | {each('until_working_s')} | "
              f"{each('change_active_s')} |")


if __name__ == "__main__":
    main()
