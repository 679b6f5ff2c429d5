"""How fast do subscriptions reach Active, and how many writes does that take? (issues 5 and 23)

Starts its own local control plane (no kube-controller-manager), installs all CRDs, publishes M external
models, then creates N subscriptions (each over 2 models, round-robin, 20 creates in flight) with the
controller running (5 workers per controller) and measures the time until every subscription is Active;
then restarts the controller on the converged cluster and measures its cache sync and counts its writes.

Every model has its own ExternalModel (distinct published names). Counted per phase: every request of the
controller that is not a GET and did not answer 404 (those are listed apart), by kind (status applies, object
applies, finalizer patches, Events created or patched), the CPU seconds of the benchmark process (the
controller plus the benchmark's own creates and polls) and of kube-apiserver. "publish" is the phase where the
M models become Ready; "converge" the N subscriptions becoming Active; "restart" the new controller's first
seconds on the converged cluster (its writes must be 0).

    .venv/bin/python benchmarks/reconcile_scale_bench.py [--scales 1,2,4] [--rounds 1]
    .venv/bin/python benchmarks/reconcile_scale_bench.py --scales 1 --rounds 4 --compare /tmp/base/src
    .venv/bin/python benchmarks/reconcile_scale_bench.py --scales 1 --rounds 3 --auth-policies 5 --compare ...

``--auth-policies N`` first creates N MaaSAuthPolicies naming every model (their status writes while the models
are published are counted as ``status maasauthpolicies`` in "publish").

``--compare DIR`` runs every other round with ``PYTHONPATH=DIR`` (e.g. ``git archive <commit> src | tar -x
-C /tmp/base``), so old and new code are measured interleaved on the same machine; medians are printed per
version with the load average at the start of each round. Each round runs in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

SUB_NS = "models-as-a-service"
WORKERS = 5
GROUP, VERSION = "maas.opendatahub.io", "v1alpha1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


WRITES: Counter[str] = Counter()
REASONS: Counter[str] = Counter()
"""Events by reason and kind of the object they are about (printed with --one)."""
SUBSCRIPTION_STATUS: dict[str, list[dict[str, Any]]] = {}
"""Every status a subscription was written with, in order: what changed between two writes of one subscription
tells a real change (its phase, a model's readiness) from a rewrite of the same status."""


def status_changes(statuses: dict[str, list[dict[str, Any]]]) -> Counter[str]:
    """For each write after a subscription's first: which status fields differ from its previous write
    (``phase Pending->Active`` for a phase change; ``none`` for a write of the same status)."""
    out: Counter[str] = Counter()
    for writes in statuses.values():
        for before, after in itertools.pairwise(writes):
            if before.get("phase") != after.get("phase"):
                out[f"phase {before.get('phase')}->{after.get('phase')}"] += 1
                continue
            differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            if differ == ["tokenRateLimitStatuses"]:  # which policy's readiness moved, and how
                was = {e["name"]: e.get("reason") for e in before["tokenRateLimitStatuses"] or ()}
                now = {e["name"]: e.get("reason") for e in after["tokenRateLimitStatuses"] or ()}
                differ = [f"tokenRateLimitStatuses {was.get(k)}->{now.get(k)}" for k in sorted(set(was) | set(now))
                          if was.get(k) != now.get(k)]
            out[", ".join(differ) or "none"] += 1
    return out


def count_writes() -> None:
    """Wrap the runtime client's transport so every write of the controller is counted by kind."""
    from maasctl.runtime import client as client_module

    original = client_module.Client._open

    async def _open(self: Any, method: str, path: str, **kw: Any) -> Any:
        if method != "GET":
            content_type = kw.get("content_type", "application/json")
            if "/events" in path:
                kind = "event"
                body = kw.get("body")
                REASONS[f"{body.get('reason')} {body['regarding'].get('kind')}" if isinstance(body, dict)
                        and "regarding" in body else "series"] += 1
            elif content_type == client_module.APPLY_PATCH:
                kind = ("status " + path.rsplit("/", 3)[-3] if path.endswith("/status")
                        else "apply " + path.rsplit("/", 2)[-2])
                body = kw.get("body")
                if kind == "status maassubscriptions" and isinstance(body, dict):
                    status = {k: v for k, v in dict(body.get("status") or {}).items() if k != "conditions"}
                    for cond in (body.get("status") or {}).get("conditions") or ():  # times differ by a write
                        status[f"condition {cond.get('type')}"] = (cond.get("status"), cond.get("reason"))
                    SUBSCRIPTION_STATUS.setdefault(path.rsplit("/", 2)[-2], []).append(status)
            elif content_type == client_module.JSON_PATCH:
                kind = "finalizer"
            else:
                kind = f"{method} " + path.rsplit("/", 2)[-2]
            WRITES[kind] += 1
        resp = await original(self, method, path, **kw)
        if method != "GET" and resp.status == 404:
            WRITES[kind] -= 1  # nothing was written (e.g. deleting what is already gone)
            WRITES[f"{kind} (404)"] += 1
        return resp

    client_module.Client._open = _open  # type: ignore[method-assign]


def reconciles(manager: Any) -> dict[str, int]:
    """Reconciles so far per controller (from the manager's controller_runtime_reconcile_total)."""
    out: Counter[str] = Counter()
    for metric in manager.metrics.reconcile_total.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels["controller"]] += int(sample.value)
    return dict(out)


async def wait_finalizer_policy(custom: Any) -> None:
    """Until new MaaSModelRefs get the finalizer at admission (policies are bound asynchronously; a real
    install happens long before the objects it serves)."""
    probe = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSModelRef", "metadata": {"name": "probe"},
             "spec": {"modelRef": {"kind": "ExternalModel", "name": "p"}}}
    from kubernetes_asyncio.client.exceptions import ApiException

    for _ in range(150):
        try:
            created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "maasmodelrefs",
                                                                   probe, dry_run="All")
            if created["metadata"].get("finalizers"):
                return
        except ApiException as exc:  # the CRD is Established but not served yet
            if exc.status != 503:
                raise
        await asyncio.sleep(0.2)
    raise TimeoutError("the finalizer admission policy did not take effect")


def apiserver_profile(cp: Any, path: str, seconds: int = 8) -> None:
    """Save kube-apiserver's CPU profile of the next `seconds` (read with `go tool pprof`)."""
    with cp.http_client(timeout=seconds + 30) as http:
        Path(path).write_bytes(http.get(f"/debug/pprof/profile?seconds={seconds}").content)


def snapshot(apiserver_pid: int) -> tuple[float, float, float, Counter[str]]:
    return time.monotonic(), self_cpu(), proc_cpu(apiserver_pid), WRITES.copy()


def delta(before: tuple[float, float, float, Counter[str]], after: tuple[float, float, float, Counter[str]]
          ) -> dict[str, Any]:
    writes = after[3].copy()
    writes.subtract(before[3])
    done = sum(v for k, v in writes.items() if not k.endswith("(404)"))
    return {"seconds": after[0] - before[0], "cpu_self": after[1] - before[1],
            "cpu_apiserver": after[2] - before[2], "writes": done, "by_kind": {k: v for k, v in writes.items() if v}}


async def run_scale(n_subs: int, n_models: int, workers: int, n_policies: int = 0) -> dict[str, Any]:
    from kubernetes_asyncio import client as k8s

    from maasctl.api.install import install_crds
    from maasctl.app import build_manager
    from maasctl.runtime.connect import connect
    from maasctl.settings import ControllerSettings
    from maasctl.testenv import ControlPlane
    from maasctl.testenv.crds import install_third_party_crds

    settings = ControllerSettings(subscription_namespace=SUB_NS, gateway_name="gw", gateway_namespace="gw",
                                  metrics_bind_address="0", health_probe_bind_address="0",
                                  max_concurrent_reconciles=workers, maas_api_url="http://127.0.0.1:1")

    async def create_all(custom: Any, ns: str, plural: str, bodies: list[dict[str, Any]]) -> None:
        sem = asyncio.Semaphore(20)

        async def one(body: dict[str, Any]) -> None:
            async with sem:
                await custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)

        await asyncio.gather(*(one(b) for b in bodies))

    async def wait_phase(custom: Any, ns: str, plural: str, phase: str, n: int, limit: float) -> None:
        """Until `n` objects have `phase`, read from one watch (polling lists would load the API server the
        benchmark measures)."""
        from kubernetes_asyncio import watch

        phases: dict[str, str] = {}
        deadline = time.monotonic() + limit
        while True:
            listed = await custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)
            phases = {i["metadata"]["name"]: (i.get("status") or {}).get("phase") for i in listed["items"]}
            version = listed["metadata"]["resourceVersion"]
            if sum(1 for p in phases.values() if p == phase) >= n:
                return
            w = watch.Watch()
            try:
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    reached = sum(1 for p in phases.values() if p == phase)
                    async for ev in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, plural,
                                             resource_version=version, timeout_seconds=60):
                        obj, name = ev["object"], ev["object"]["metadata"]["name"]
                        reached -= phases.pop(name, None) == phase
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            phases[name] = (obj.get("status") or {}).get("phase")
                            reached += phases[name] == phase
                        if reached >= n:
                            return
            except TimeoutError:
                raise TimeoutError(f"{plural}: fewer than {n} {phase} after {limit}s") from None
            finally:
                w.stop()

    count_writes()
    pprof = os.environ.get("BENCH_APISERVER_PPROF")  # a path: CPU profile of kube-apiserver while converging
    cp = ControlPlane(with_controller_manager=False, extra_apiserver_flags=["--profiling=true"] if pprof else [])
    await asyncio.to_thread(cp.start)
    try:
        apiserver = cp._procs["kube-apiserver"].popen
        assert apiserver is not None
        pid = apiserver.pid
        with cp.http_client() as http:
            await asyncio.to_thread(install_third_party_crds, http)
        api = await connect(str(cp.kubeconfig))
        # the finalizer admission policy where the measured code has it (older code adds finalizers by PATCH)
        has_policy = "with_finalizer_policy" in inspect.signature(install_crds).parameters
        policy = {"with_finalizer_policy": True} if has_policy else {}
        await install_crds(api, subscription_namespace=SUB_NS, **policy)
        if has_policy:
            await wait_finalizer_policy(k8s.CustomObjectsApi(api))
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        for ns in (SUB_NS, "models", "gw"):
            await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        await create_all(custom, "models", "externalmodels", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ExternalModel", "metadata": {"name": f"p{i}"},
            "spec": {"provider": "openai", "endpoint": "https://api.provider.test/v1", "targetModel": f"m{i}"}}
            for i in range(n_models)])

        # MaaSAuthPolicies naming every model, there before the models are published (issue 39's scenario:
        # each policy's status summarises all of them, written as they become ready)
        await create_all(custom, SUB_NS, "maasauthpolicies", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSAuthPolicy", "metadata": {"name": f"a{i}"},
            "spec": {"subjects": {"groups": [{"name": f"team-{i}"}]},
                     "modelRefs": [{"name": f"m{k}", "namespace": "models"} for k in range(n_models)]}}
            for i in range(n_policies)])

        manager_api = await connect(str(cp.kubeconfig))
        manager = build_manager(manager_api, settings)
        task = asyncio.create_task(manager.run())
        await manager.cache.wait_for_sync(deadline=60)
        t0 = snapshot(pid)
        await create_all(custom, "models", "maasmodelrefs", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSModelRef", "metadata": {"name": f"m{i}"},
            "spec": {"modelRef": {"kind": "ExternalModel", "name": f"p{i}"}}} for i in range(n_models)])
        await wait_phase(custom, "models", "maasmodelrefs", "Ready", n_models, 300)
        await asyncio.sleep(2)  # let the last writes of publishing land before counting the next phase
        t1 = snapshot(pid)
        published = reconciles(manager)
        profiling = asyncio.create_task(asyncio.to_thread(apiserver_profile, cp, pprof)) if pprof else None
        await create_all(custom, SUB_NS, "maassubscriptions", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSSubscription", "metadata": {"name": f"s{i}"},
            "spec": {"owner": {"groups": [{"name": f"team-{i}"}]}, "modelRefs": [
                {"name": f"m{(i + k) % n_models}", "namespace": "models",
                 "tokenRateLimits": [{"limit": 1000 + i, "window": "1m"}]} for k in (0, 1)]}}
            for i in range(n_subs)])
        created = time.monotonic() - t1[0]
        await wait_phase(custom, SUB_NS, "maassubscriptions", "Active", n_subs, 900)
        t2 = snapshot(pid)
        converged = Counter(reconciles(manager))
        converged.subtract(published)
        if profiling is not None:
            await profiling
        await asyncio.sleep(3)  # writes still in flight after the last Active (e.g. Events) count too
        t3 = snapshot(pid)
        manager.stop()
        await task
        await manager_api.close()

        restarted_api = await connect(str(cp.kubeconfig))
        restarted = build_manager(restarted_api, settings)
        r0 = snapshot(pid)
        task = asyncio.create_task(restarted.run())
        await restarted.cache.wait_for_sync(deadline=60)
        r1 = snapshot(pid)
        await asyncio.sleep(5)
        r2 = snapshot(pid)
        restarted.stop()
        await task
        await restarted_api.close()
        await api.close()
        converge = delta(t1, t2)
        converge["tail_writes"] = delta(t2, t3)["writes"]
        converge["create_s"] = created
        converge["reconciles"] = {k: v for k, v in converged.items() if v}
        return {"subscriptions": n_subs, "models": n_models, "publish": delta(t0, t1), "converge": converge,
                "sync": delta(r0, r1), "restart": delta(r0, r2), "event_reasons": dict(REASONS),
                "subscription_rewrites": dict(status_changes(SUBSCRIPTION_STATUS)),
                "subscription_status_writes": [len(SUBSCRIPTION_STATUS), sum(map(len, SUBSCRIPTION_STATUS.values()))]}
    finally:
        await asyncio.to_thread(cp.stop)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def one_round(scale: int, workers: int, pythonpath: str | None, auth_policies: int = 0) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run([sys.executable, __file__, "--one", str(scale), "--workers", str(workers),
                           "--auth-policies", str(auth_policies)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"round failed ({pythonpath or 'this checkout'}):\n{done.stderr[-4000:]}")
    out = done.stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--workers", type=int, default=WORKERS, help="max concurrent reconciles per controller")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare", default=None, help="PYTHONPATH of the code to compare with (interleaved)")
    parser.add_argument("--auth-policies", type=int, default=0,
                        help="MaaSAuthPolicies naming every model, created before the models are published")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(asyncio.run(run_scale(300 * args.one, 50 * args.one, args.workers, args.auth_policies))),
              flush=True)
        return
    versions: list[tuple[str, str | None]] = [("this checkout", None)]
    if args.compare:
        versions.insert(0, (f"compare ({args.compare})", args.compare))
    for scale in (int(s) for s in args.scales.split(",")):
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in versions}
        for rnd in range(args.rounds):
            for name, path in versions:
                before = load()
                r = one_round(scale, args.workers, path, args.auth_policies)
                r["load"] = f"{before}-{load()}"
                results[name].append(r)
                c = r["converge"]
                print(f"# {scale}x round {rnd + 1} {name}: load {r['load']} active {c['seconds']:.1f}s "
                      f"writes {c['writes']} {c['by_kind']} cpu self {c['cpu_self']:.1f}s apiserver "
                      f"{c['cpu_apiserver']:.1f}s reconciles {c.get('reconciles')}; "
                      f"publish {r['publish']['writes']} {r['publish']['by_kind']}; "
                      f"sync {r['sync']['seconds']:.2f}s cpu {r['sync']['cpu_self']:.2f}s "
                      f"restart writes {r['restart']['by_kind']}; "
                      f"Events {r['event_reasons']}; "
                      f"subscription rewrites by what changed {r.get('subscription_rewrites')} "
                      f"(subscriptions, status writes recorded: {r.get('subscription_status_writes')})", flush=True)
        print()
        print("| version | scale | subs | models | load | created (s) | all Active (s) | writes | of which "
              "status / finalizer / applies / Events | CPU self (s) | CPU apiserver (s) | publish writes | "
              "sync on restart (s) | sync CPU self (s) | restart writes |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, _ in versions:
            rs = results[name]

            def med(f: Any, rs: list[dict[str, Any]] = rs) -> float:
                return float(statistics.median(f(r) for r in rs))

            def kinds(r: dict[str, Any]) -> tuple[int, int, int, int]:
                k = r["converge"]["by_kind"]
                applies = sum(v for n, v in k.items() if n.startswith("apply"))
                status = sum(v for n, v in k.items() if n.startswith("status"))
                return status, k.get("finalizer", 0), applies, k.get("event", 0)

            split = " / ".join(f"{med(lambda r, i=i: kinds(r)[i]):.0f}" for i in range(4))
            print(f"| {name} | {scale}x | {rs[0]['subscriptions']} | {rs[0]['models']} | "
                  f"{', '.join(r['load'] for r in rs)} | {med(lambda r: r['converge']['create_s']):.1f} | "
                  f"{med(lambda r: r['converge']['seconds']):.1f} | {med(lambda r: r['converge']['writes']):.0f} | "
                  f"{split} | {med(lambda r: r['converge']['cpu_self']):.1f} | "
                  f"{med(lambda r: r['converge']['cpu_apiserver']):.1f} | "
                  f"{med(lambda r: r['publish']['writes']):.0f} | "
                  f"{med(lambda r: r['sync']['seconds']):.2f} | {med(lambda r: r['sync']['cpu_self']):.2f} | "
                  f"{med(lambda r: r['restart']['writes']):.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
