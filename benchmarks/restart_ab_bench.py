"""Restarts on converged clusters, the versions alternating (A B C, C B A, ...): until working and the CPU until
then, without a fresh control plane per round.

reference_restart_bench.py builds a control plane per version and round, so each restart also carries that
round's noise, and whichever version runs first in a round runs on a busier machine (its slowest restarts were
first-in-round in every run of 2026-12-07). Here each product gets one cluster, built and converged once (the same
objects: N subscriptions over K of M ExternalModels, Kuadrant played by the benchmark; maasctl's by this checkout,
the reference's by the reference), both clusters stay up, and each version is restarted in turn ``--restarts``
times, the order reversing every round. ``--compare DIR`` adds maasctl's code at DIR, restarted on maasctl's
cluster; ``--no-reference`` leaves the reference out. A restart is timed from the exec to its last "starting
workers" line (controller-runtime's "Starting workers" for the reference), with the process's CPU until then.

    MAASCTL_THIRD_PARTY_CRDS=../shared/crds .venv/bin/python benchmarks/restart_ab_bench.py \\
        [--compare /tmp/base/src] [--no-reference] [--restarts 8] [--subs 300 --models 50 --per-sub 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from reference_restart_bench import Controller, add_cluster_arguments, compile_maasctl, converge, prepare

from maasctl.testenv import ControlPlane


async def until_working(ctl: Controller, limit: float = 60.0) -> None:
    for _ in range(int(limit / 0.05)):
        if ctl.working is not None:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{ctl.name} not working after {limit}s:\n{''.join(ctl.lines[-15:])}")


async def converged_cluster(product: str, args: argparse.Namespace) -> tuple[ControlPlane, Path]:
    """A control plane with ``product``'s CRDs and the objects, converged once by ``product``'s controller."""
    work = Path(tempfile.mkdtemp(prefix=f"restart-ab-{product}-"))
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    with cp.http_client(timeout=60) as http:
        await prepare(product, args, cp, http, work)
        ctl = Controller(product, cp.kubeconfig, work, Path(args.reference).expanduser())
        await ctl.start()
        n, seconds = await converge(http, ctl, args)
        await asyncio.sleep(args.settle)
        await ctl.stop()
    if n != args.subs:
        raise RuntimeError(f"{product} made {n} of {args.subs} subscriptions Active")
    print(f"# {product}: {n} Active in {seconds:.1f} s", flush=True)
    return cp, work


async def run(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    products = ["maasctl", *([] if args.no_reference else ["reference"])]
    clusters: dict[str, tuple[ControlPlane, Path]] = {}
    try:
        for product in products:
            clusters[product] = await converged_cluster(product, args)
        # (name, product, maasctl's PYTHONPATH)
        versions = [("maasctl", "maasctl", None), *([("maasctl-before", "maasctl", args.compare)] if args.compare
                                                     else []), *([("reference", "reference", None)]
                                                                 if "reference" in clusters else [])]
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in versions}
        for i in range(args.restarts):
            for name, product, pythonpath in versions if i % 2 == 0 else list(reversed(versions)):
                cp, work = clusters[product]
                ctl = Controller(product, cp.kubeconfig, work, Path(args.reference).expanduser(),
                                 pythonpath=pythonpath)
                await ctl.start()
                await until_working(ctl)
                await asyncio.sleep(1.0)
                await ctl.stop()
                assert ctl.working is not None and ctl.working_cpu is not None
                results[name].append((ctl.working, ctl.working_cpu))
                print(f"# {i} {name}: until working {ctl.working:.3f} s, CPU {ctl.working_cpu:.2f} s", flush=True)
        return results
    finally:
        for cp, _ in clusters.values():
            await asyncio.to_thread(cp.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cluster_arguments(parser)
    parser.add_argument("--compare", help="PYTHONPATH of maasctl's code before a change: maasctl-before")
    parser.add_argument("--no-reference", action="store_true", help="maasctl's versions only")
    parser.add_argument("--restarts", type=int, default=8)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    compile_maasctl(args)
    results = asyncio.run(run(args))
    print(json.dumps(results))
    print("| version | until working (s): median, min-max | CPU until then (s): median, min-max |")
    print("|---|---|---|")
    for name, rows in results.items():
        wall, cpu = [r[0] for r in rows], [r[1] for r in rows]
        print(f"| {name} | {statistics.median(wall):.3f}, {min(wall):.2f}-{max(wall):.2f} | "
              f"{statistics.median(cpu):.2f}, {min(cpu):.2f}-{max(cpu):.2f} |")
    mine = results["maasctl"]
    for other in (name for name in results if name != "maasctl"):
        pairs = list(zip(mine, results[other], strict=True))
        print(f"maasctl against {other}: sooner in {sum(a[0] < b[0] for a, b in pairs)} of {len(pairs)} rounds, "
              f"less CPU in {sum(a[1] < b[1] for a, b in pairs)}")


if __name__ == "__main__":
    main()
