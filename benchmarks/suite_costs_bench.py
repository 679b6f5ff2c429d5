"""What the suite's recurring steps cost in CPU, old code against new, interleaved (issue 39).

The test suite is CPU-bound on two cores, so it gets faster only by doing less work. This measures the steps it
repeats hundreds of times, each in a fresh child process whose CPU (user + system, its reaped children
included: the control plane's etcd and kube-apiserver) the operating system accounts:

- ``keys-job``: the key-cleanup Job's command (`maasctl keys revoke-subscription`, one per deleted subscription)
  against a port nobody listens on (it fails fast; the cost is the process's start-up).
- ``testmodel``: a test model process (`maasctl testmodel`, several per stack) until it answers /health.
- ``control-plane``: a control plane with the third-party CRDs until they are served, then stopped (old code:
  start and install them; new: start from the cached etcd seed, `testenv/seed.py`).
- ``http-clients``: 100 `httpx.AsyncClient`s, as test helpers and console pages open them (the default trust
  store per client, or the shared one of `maasctl.tls`); this one is not code-version dependent: both ways run
  in the new code's process.

    .venv/bin/python benchmarks/suite_costs_bench.py --compare /tmp/base/src [--rounds 5] [--only keys-job,...]

``--compare DIR`` is the old code's `src` (``git archive <commit> src | tar -x -C /tmp/base``); the rounds
alternate old, new, new, old, ... so drift on a shared machine falls on both. Medians per version are printed
with each round's load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAASCTL = str(Path(sys.executable).with_name("maasctl"))

TESTMODEL = """
import socket, subprocess, sys, time, httpx
from maasctl.testenv.controlplane import free_port
port = free_port()
proc = subprocess.Popen([sys.argv[1], "testmodel", f"--port={port}", "--model=m"])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
            break
    except httpx.HTTPError:
        time.sleep(0.05)
proc.terminate(); proc.wait()
"""

CONTROL_PLANE = """
import importlib.util
from maasctl.testenv import ControlPlane
if importlib.util.find_spec("maasctl.testenv.seed") is not None:
    from maasctl.testenv.seed import third_party_seed
    with ControlPlane(with_controller_manager=False, etcd_seed=third_party_seed()):
        pass
else:
    from maasctl.testenv.crds import install_third_party_crds
    with ControlPlane(with_controller_manager=False) as cp, cp.http_client() as http:
        install_third_party_crds(http)
"""

HTTP_CLIENTS = """
import asyncio, sys, httpx
from maasctl.tls import default_tls
async def main(shared):
    for _ in range(100):
        async with httpx.AsyncClient(**({"verify": default_tls()} if shared else {})) as http:
            pass
asyncio.run(main(sys.argv[1] == "shared"))
"""


def scenario_argv(name: str, version: str) -> list[str]:
    if name == "keys-job":
        return [sys.executable, "-m", "maasctl.cli", "keys", "revoke-subscription", "--subscription", "ns/s",
                "--maas-api-url", "http://127.0.0.1:9", "--token-file", "/etc/hostname"]
    if name == "testmodel":
        return [sys.executable, "-c", TESTMODEL, MAASCTL]
    if name == "control-plane":
        return [sys.executable, "-c", CONTROL_PLANE]
    if name == "http-clients":
        return [sys.executable, "-c", HTTP_CLIENTS, "shared" if version == "new" else "per-client"]
    raise ValueError(name)


def run_once(name: str, version: str, src: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run in a child process, its reaped children included."""
    env = {**os.environ, "PYTHONPATH": src}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(scenario_argv(name, version), env=env, cwd=REPO, check=False, capture_output=True,
                          timeout=600)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != (1 if name == "keys-job" else 0):  # the Job's command fails: nobody listens on port 9
        raise RuntimeError(f"{name} ({version}) exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", required=True, help="the old code's src directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="keys-job,testmodel,control-plane,http-clients")
    args = parser.parse_args()
    code = {"old": str(Path(args.compare).resolve()), "new": str(REPO / "src")}
    for name in args.only.split(","):
        # the two ways of opening clients are both measured in the new code (the old has no maasctl.tls)
        versions = {"old": code["new"], "new": code["new"]} if name == "http-clients" else code
        run_once(name, "new", versions["new"])  # warm-up: caches (the control plane's seed, .pyc files) filled
        run_once(name, "old", versions["old"])
        results: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            load = os.getloadavg()[0]
            row = []
            for version in order:
                cpu, wall = run_once(name, version, versions[version])
                results[version].append((cpu, wall))
                row.append(f"{version} {cpu:.2f} s CPU / {wall:.2f} s")
            print(f"{name} round {r + 1} (load {load:.1f}): " + ", ".join(row), flush=True)
        for version in ("old", "new"):
            cpu = statistics.median(c for c, _ in results[version])
            wall = statistics.median(w for _, w in results[version])
            print(f"{name} {version}: median {cpu:.2f} s CPU, {wall:.2f} s wall", flush=True)
        ratio = statistics.median(n[0] / o[0] for o, n in zip(results["old"], results["new"], strict=True))
        print(f"{name}: new/old CPU, median of the pairs: {ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
