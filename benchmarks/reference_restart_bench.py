"""A restarted controller, maasctl against the reference Go controller (issue 39), side by side on one machine.

Each round starts a fresh local control plane (etcd + kube-apiserver) per controller, installs that controller's
CRDs (maasctl's with the finalizer admission policy, as ``hack/deploy.sh`` installs them), creates the same
objects (M credential Secrets and ExternalModels with a host-name endpoint and a credentialRef, M MaaSModelRefs,
N MaaSSubscriptions over K models each) and starts the controller as a process of its own: it converges the
backlog ("all Active": from the process start until every subscription is Active), is stopped after a settle,
and started again on the converged cluster ("restart"). Measured on the
restart, from the process start:

- "until working": until the controller works on its cache: its last "starting workers" log line (each controller
  writes one once its informers have synced: controller-runtime's ``Starting workers``, maasctl's ``starting
  workers``), read as it is written.
- the process's CPU seconds until then (``/proc``), and kube-apiserver's;
- the requests it made in its first ``--observe`` seconds, from kube-apiserver's audit log (Metadata level, every
  request; the controller's by its user agent, not the benchmark's or kube-apiserver's own): writes, and GETs of
  single objects (LIST and WATCH are the informers' start). The writes of the first start (converging the
  backlog, then the settle) are counted the same way.

Then it is stopped and started once more, and a new subscription is created as the process starts: "a change at
the restart" is the time from the process start until that subscription is Active (polled every 20 ms), the time a
restarted controller leaves a user's change unserved.

The objects are ready for both: the benchmark plays the Gateway's controller and Kuadrant (the Gateway
Accepted and Programmed, each HTTPRoute accepted by it, each TokenRateLimitPolicy and AuthPolicy Accepted and
Enforced), as a cluster would. The two controllers alternate which goes first in a round.

The reference (``--reference``) is opendatahub-io/models-as-a-service's maas-controller, built with this machine's
Go: its go.mod pins a KServe pseudo-version the module proxy does not serve, so ``go mod edit -replace
github.com/kserve/kserve=github.com/kserve/kserve@v0.17.0``, and ``ResolveModelAlias`` of
``pkg/controller/maas/providers_llmisvc.go`` returns "" (v0.17.0's Addressable has no Models; only
LLMInferenceService models use it, the benchmark publishes ExternalModels); then ``GOTOOLCHAIN=local
GOFLAGS=-mod=mod go build -o manager ./cmd/manager``. Its CRDs (``--reference-crds``): the repository's
``deployment/base/maas-controller/crd/bases/*.yaml`` and Istio's ServiceEntry and DestinationRule CRDs (from
istio.io/api's ``kubernetes/customresourcedefinitions.gen.yaml``), which its ExternalModel controller writes.

    MAASCTL_THIRD_PARTY_CRDS=../shared/crds .venv/bin/python benchmarks/reference_restart_bench.py \\
        --reference ~/.cache/maasctl/reference/manager --reference-crds ~/.cache/maasctl/reference/crds \\
        [--subs 300 --models 50 --per-sub 3] [--rounds 3] [--only maasctl|reference] [--compare /tmp/base/src]

``--compare DIR`` adds ``maasctl-before``: maasctl's code from DIR (e.g. ``git archive <commit> src | tar -x -C
/tmp/base``), interleaved with the others.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from reconcile_scale_bench import proc_cpu, wait_finalizer_policy

from maasctl.testenv import ControlPlane
from maasctl.testenv.controlplane import die_with_parent, free_port
from maasctl.testenv.crds import apply_documents, install_third_party_crds, load_documents, wait_established

SUB_NS, MODELS_NS, LEASE_NS = "models-as-a-service", "models", "opendatahub"
GROUP_VERSION = "maas.opendatahub.io/v1alpha1"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def objects(n_subs: int, n_models: int, per_sub: int, n_policies: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(API path prefix, namespace, body) of everything both controllers get, in creation order."""
    key = base64.b64encode(b"sk-bench").decode()
    out: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(n_models):
        out.append(("/api/v1", "secrets", {"apiVersion": "v1", "kind": "Secret",
                                           "metadata": {"name": f"p{i}-key", "namespace": MODELS_NS},
                                           "data": {"api-key": key}}))
        out.append((f"/apis/{GROUP_VERSION}", "externalmodels", {
            "apiVersion": GROUP_VERSION, "kind": "ExternalModel", "metadata": {"name": f"p{i}", "namespace": MODELS_NS},
            "spec": {"provider": "openai", "endpoint": "api.provider.test", "targetModel": f"m{i}",
                     "credentialRef": {"name": f"p{i}-key"}}}))
    for i in range(n_models):
        out.append((f"/apis/{GROUP_VERSION}", "maasmodelrefs", {
            "apiVersion": GROUP_VERSION, "kind": "MaaSModelRef", "metadata": {"name": f"m{i}", "namespace": MODELS_NS},
            "spec": {"modelRef": {"kind": "ExternalModel", "name": f"p{i}"}}}))
    for i in range(n_policies):  # each grants every model to the subscriptions' groups
        out.append((f"/apis/{GROUP_VERSION}", "maasauthpolicies", {
            "apiVersion": GROUP_VERSION, "kind": "MaaSAuthPolicy", "metadata": {"name": f"a{i}", "namespace": SUB_NS},
            "spec": {"subjects": {"groups": [{"name": f"team-{k}"} for k in range(i, n_subs, n_policies)]},
                     "modelRefs": [{"name": f"m{k}", "namespace": MODELS_NS} for k in range(n_models)]}}))
    out.extend(subscription(i, n_models, per_sub) for i in range(n_subs))
    return out


def subscription(i: int, n_models: int, per_sub: int) -> tuple[str, str, dict[str, Any]]:
    return (f"/apis/{GROUP_VERSION}", "maassubscriptions", {
        "apiVersion": GROUP_VERSION, "kind": "MaaSSubscription", "metadata": {"name": f"s{i}", "namespace": SUB_NS},
        "spec": {"owner": {"groups": [{"name": f"team-{i}"}]}, "modelRefs": [
            {"name": f"m{(i + k) % n_models}", "namespace": MODELS_NS,
             "tokenRateLimits": [{"limit": 1000 + i, "window": "1m"}]} for k in range(per_sub)]}})


async def until_active(http: httpx.Client, name: str, limit: float) -> float | None:
    """When (time.monotonic) subscription `name` was first seen Active (polled every 20 ms); None after `limit`."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        got = await asyncio.to_thread(http.get, f"/apis/{GROUP_VERSION}/namespaces/{SUB_NS}/maassubscriptions/{name}")
        if ((got.json() if got.status_code == 200 else {}).get("status") or {}).get("phase") == "Active":
            return time.monotonic()
        await asyncio.sleep(0.02)
    return None


def create(http: httpx.Client, items: list[tuple[str, str, dict[str, Any]]]) -> None:
    for prefix, plural, body in items:
        resp = http.post(f"{prefix}/namespaces/{body['metadata']['namespace']}/{plural}", json=body)
        if resp.status_code >= 300:
            raise RuntimeError(f"create {plural} {body['metadata']['name']}: {resp.status_code} {resp.text[:300]}")


def create_namespaces(http: httpx.Client) -> None:
    for ns in (SUB_NS, MODELS_NS, "gw", LEASE_NS):
        http.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).raise_for_status()


def active(http: httpx.Client) -> int:
    items = http.get(f"/apis/{GROUP_VERSION}/namespaces/{SUB_NS}/maassubscriptions").json()["items"]
    return sum(1 for i in items if (i.get("status") or {}).get("phase") == "Active")


AUDIT_POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
NOT_THE_CONTROLLER = ("python-httpx",)


def requests_since(audit_log: Path, since: str, until: str = "~") -> Counter[str]:
    """The controller's requests received from `since` until before `until` (RFC 3339), as "verb
    resource[/subresource]"."""
    out: Counter[str] = Counter()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or not since <= event["requestReceivedTimestamp"] < until:
            continue
        if event["user"].get("username") != "admin" or "objectRef" not in event:  # kube-apiserver's own
            continue
        if (event.get("userAgent") or "").startswith(NOT_THE_CONTROLLER):  # the benchmark's
            continue
        ref = event["objectRef"]
        what = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out[f"{event['verb']} {what}"] += 1
    return out


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() % 1 * 1e6):06d}Z"


GATEWAY = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
           "metadata": {"name": "gw", "namespace": "gw"},
           "spec": {"gatewayClassName": "bench", "listeners": [
               {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "maas.bench.test",
                "allowedRoutes": {"namespaces": {"from": "All"}}}]}}
POLICIES = (("/apis/gateway.networking.k8s.io/v1", "httproutes"),
            ("/apis/kuadrant.io/v1alpha1", "tokenratelimitpolicies"), ("/apis/kuadrant.io/v1", "authpolicies"))


def condition(kind: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": kind, "message": "bench stand-in",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def accept_gateway(http: httpx.Client) -> None:
    """The Gateway, Accepted and Programmed with an address, as its controller would report it."""
    http.post("/apis/gateway.networking.k8s.io/v1/namespaces/gw/gateways", json=GATEWAY).raise_for_status()
    http.patch("/apis/gateway.networking.k8s.io/v1/namespaces/gw/gateways/gw/status",
               json={"status": {"addresses": [{"type": "IPAddress", "value": "10.0.0.10"}],
                                "conditions": [condition("Accepted"), condition("Programmed")]}},
               headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def accept_policies(http: httpx.Client) -> int:
    """Play the gateway controller and Kuadrant: every HTTPRoute accepted by the Gateway, every
    TokenRateLimitPolicy and AuthPolicy Accepted and Enforced (once); returns how many were marked."""
    marked = 0
    for prefix, plural in POLICIES:
        listed = http.get(f"{prefix}/{plural}")
        if listed.status_code == 429:  # a CRD's storage still initializing: the next pass
            continue
        if listed.status_code != 200:
            raise RuntimeError(f"list {plural}: {listed.status_code} {listed.text[:400]}")
        for item in listed.json()["items"]:
            status = item.get("status") or {}
            if status.get("parents") or status.get("conditions"):
                continue
            if plural == "httproutes":
                body = {"status": {"parents": [{
                    "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
                                  "namespace": "gw"},
                    "controllerName": "bench.test/gateway",
                    "conditions": [condition("Accepted"), condition("ResolvedRefs")]}]}}
            else:
                body = {"status": {"conditions": [condition("Accepted"), condition("Enforced")]}}
            meta = item["metadata"]
            http.patch(f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}/status", json=body,
                       headers={"Content-Type": "application/merge-patch+json"})
            marked += 1
    return marked


class Controller:
    """One controller process: how to start it and how to tell that it works on its cache."""

    def __init__(self, name: str, kubeconfig: Path, work: Path, reference: Path | None, *,
                 leader_elect: bool = False, pythonpath: str | None = None) -> None:
        self.name, self.kubeconfig, self.work, self.reference = name, kubeconfig, work, reference
        self.leader_elect, self.pythonpath = leader_elect, pythonpath  # pythonpath: maasctl's code to run
        self.proc: subprocess.Popen[str] | None = None
        self.probe = 0
        self.started = 0.0
        self.working: float | None = None
        self.working_at: float | None = None  # time.monotonic() of the last "starting workers" line
        self.working_cpu: float | None = None
        self.lines: list[str] = []
        self.runs = 0

    def command(self, probe_port: int) -> list[str]:
        if self.name == "maasctl":
            # BENCH_PROFILE=FILE: the restart under cProfile until its last controller starts its workers
            profile = os.environ.get("BENCH_PROFILE")
            prefix = [sys.executable, __file__, "--profile-until-working", profile] if profile and self.runs == 2 \
                else [str(Path(sys.executable).parent / "maasctl")]
            return [*prefix, "run", "--kubeconfig", str(self.kubeconfig),
                    "--leader-elect" if self.leader_elect else "--no-leader-elect",
                    "--leader-election-namespace", LEASE_NS,
                    "--health-probe-bind-address", f"127.0.0.1:{probe_port}", "--metrics-bind-address", "0",
                    "--subscription-namespace", SUB_NS, "--gateway-name", "gw", "--gateway-namespace", "gw",
                    "--max-concurrent-reconciles", "5", "--maas-api-url", "http://127.0.0.1:1",
                    "--log-format", "json", "--log-level", "info"]
        assert self.reference is not None
        return [str(self.reference), f"--leader-elect={str(self.leader_elect).lower()}",
                f"--health-probe-bind-address=127.0.0.1:{probe_port}",
                "--metrics-bind-address=0", "--gateway-name=gw", "--gateway-namespace=gw",
                f"--maas-subscription-namespace={SUB_NS}", f"--controller-namespace={LEASE_NS}",
                "--monitoring-namespace=", "--max-concurrent-reconciles=5"]

    async def start(self) -> None:
        self.working = self.working_at = self.working_cpu = None
        self.lines = []
        self.probe = free_port()
        self.runs += 1
        # LEADER_ELECTION_NAMESPACE: the reference built for a process outside a Pod (see the docstring)
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), TMPDIR=str(self.work),
                   LEADER_ELECTION_NAMESPACE=LEASE_NS)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        self.started = time.monotonic()
        # started here, not in a thread, so that the clock starts with the exec
        self.proc = subprocess.Popen(self.command(self.probe), env=env, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                                     stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        self._reader = asyncio.create_task(asyncio.to_thread(self._read_log))

    def _read_log(self) -> None:
        """Every log line; the last "starting workers" one's time and the process's CPU then."""
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "starting workers" in line.lower():
                self.working_at = time.monotonic()
                self.working, self.working_cpu = self.working_at - self.started, proc_cpu(self.proc.pid)

    async def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        await self._reader


def webhook_certs(work: Path) -> None:
    """The reference's webhook server refuses to start without a serving certificate in its default folder."""
    folder = work / "k8s-webhook-server" / "serving-certs"
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")],
                   check=True, capture_output=True)


async def prepare(name: str, args: argparse.Namespace, cp: ControlPlane, http: httpx.Client, work: Path) -> None:
    """The controller's CRDs (maasctl's with the finalizer admission policy, as deploy.sh installs them), the
    namespaces, the Gateway (accepted) and the objects of ``args``."""
    await asyncio.to_thread(install_third_party_crds, http)
    if name.startswith("maasctl"):
        from kubernetes_asyncio import client as k8s

        from maasctl.api.install import install_crds
        from maasctl.runtime.connect import connect

        api = await connect(str(cp.kubeconfig))
        await install_crds(api, subscription_namespace=SUB_NS, with_finalizer_policy=True)
        await wait_finalizer_policy(k8s.CustomObjectsApi(api))
        await api.close()
    else:
        docs = load_documents(sorted(Path(args.reference_crds).glob("*.yaml")))
        wait_established(http, apply_documents(http, docs, field_manager="bench"))
        webhook_certs(work)
    await asyncio.to_thread(create_namespaces, http)
    await asyncio.to_thread(accept_gateway, http)
    await asyncio.to_thread(create, http, objects(args.subs, args.models, args.per_sub, args.auth_policies))


async def converge(http: httpx.Client, ctl: Controller, args: argparse.Namespace) -> tuple[int, float | None]:
    """Play Kuadrant until every subscription is Active: (how many are, seconds from the process start or None
    after ``args.converge_limit``, with the stuck objects' status on stderr)."""
    deadline = time.monotonic() + args.converge_limit
    while (n := active(http)) < args.subs:
        if time.monotonic() > deadline or (ctl.proc is not None and ctl.proc.poll() is not None):
            break
        await asyncio.to_thread(accept_policies, http)
        await asyncio.sleep(0.2)
    converged = time.monotonic() - ctl.started if n == args.subs else None
    if converged is None:  # say why
        print(json.dumps(await asyncio.to_thread(stuck, http)), file=sys.stderr)
    return n, converged


def stuck(http: httpx.Client) -> list[Any]:
    """The status of the first subscription, model and ExternalModel."""
    return [http.get(f"/apis/{GROUP_VERSION}/namespaces/{ns}/{plural}/{name}").json().get("status")
            for ns, plural, name in ((SUB_NS, "maassubscriptions", "s0"), (MODELS_NS, "maasmodelrefs", "m0"),
                                     (MODELS_NS, "externalmodels", "p0"))]


async def one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"refbench-{name}-"))
    audit_log = work / "audit.log"
    (work / "audit-policy.yaml").write_text(AUDIT_POLICY)
    cp = ControlPlane(with_controller_manager=False, extra_apiserver_flags=[
        f"--audit-policy-file={work / 'audit-policy.yaml'}", f"--audit-log-path={audit_log}"])
    await asyncio.to_thread(cp.start)
    ctl = Controller("maasctl" if name.startswith("maasctl") else name, cp.kubeconfig, work,
                     Path(args.reference).expanduser() if args.reference else None,
                     pythonpath=args.compare if name == "maasctl-before" else None)
    try:
        apiserver = cp._procs["kube-apiserver"].popen
        assert apiserver is not None
        with cp.http_client(timeout=60) as http:
            await prepare(name, args, cp, http, work)
            first_start = now_rfc3339()  # maasctl's CRDs were installed with the controller's user agent: not counted
            await ctl.start()
            n, converged = await converge(http, ctl, args)
            await asyncio.sleep(args.settle)
            await ctl.stop()
            first_log = ctl.lines
            (work / "first-start.log").write_text("".join(first_log))

            since, api_cpu = now_rfc3339(), proc_cpu(apiserver.pid)
            await ctl.start()
            await asyncio.sleep(args.observe)
            assert ctl.proc is not None
            cpu_observed = proc_cpu(ctl.proc.pid)
            api_cpu = proc_cpu(apiserver.pid) - api_cpu
            await ctl.stop()
            (work / "restart.log").write_text("".join(ctl.lines))
            await asyncio.sleep(1)  # the audit log is written in batches
            made = requests_since(audit_log, since)
            writes = {k: v for k, v in made.items() if k.split(" ", 1)[0] in WRITE_VERBS}
            first = requests_since(audit_log, first_start, since)  # converging the backlog, and its settle
            converge_writes = {k: v for k, v in first.items() if k.split(" ", 1)[0] in WRITE_VERBS}
            gets = {k: v for k, v in made.items() if k.startswith("get ")}

            # a change made as the controller restarts: a new subscription, created when the process starts
            await ctl.start()
            await asyncio.to_thread(create, http, [subscription(args.subs, args.models, args.per_sub)])
            active_at = await until_active(http, f"s{args.subs}", 60)
            change_served = active_at - ctl.started if active_at is not None else None
            await ctl.stop()
            return {"version": name, "active_at_first_start": n, "all_active_s": converged,
                    "until_working_s": ctl.working, "cpu_until_working_s": ctl.working_cpu,
                    "cpu_observed_s": cpu_observed, "apiserver_cpu_observed_s": api_cpu,
                    "restart_writes": sum(writes.values()), "restart_writes_by": writes,
                    "restart_gets": sum(gets.values()), "restart_gets_by": gets,
                    "restart_lists": sum(v for k, v in made.items() if k.startswith("list ")),
                    "new_subscription_active_s": change_served,
                    "converge_writes": sum(converge_writes.values()), "converge_writes_by": converge_writes,
                    "log_tail": "".join((ctl.lines or first_log)[-15:]) if ctl.working is None or converged is None
                    else ""}
    finally:
        if ctl.proc is not None and ctl.proc.poll() is None:  # on an error: its log reader ends with it
            await ctl.stop()
        await asyncio.to_thread(cp.stop)
        remove_work(work, args)


def profile_until_working(path: str, argv: list[str]) -> None:
    """``maasctl <argv>`` under cProfile from before its imports; the profile is saved at each "starting workers"
    line (the last one stays), so it covers what the process did until it worked."""
    import cProfile
    import logging

    profiler = cProfile.Profile()
    profiler.enable()
    from maasctl import cli

    class Dump(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "starting workers":
                profiler.disable()
                profiler.dump_stats(path)
                profiler.enable()

    logging.getLogger("maasctl.runtime.controller").addHandler(Dump())
    sys.exit(cli.main(argv))


def remove_work(work: Path, args: argparse.Namespace) -> None:
    """A round's folder (audit log, controller logs) goes unless ``--keep``."""
    if args.keep:
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


def compile_maasctl(args: argparse.Namespace) -> None:
    """Byte-compile the maasctl code every version runs (this checkout's and ``--compare``'s), as the image's pip
    install does. Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), an import never writes a .pyc, so a
    module without a current one is compiled from source at every start: every module of a ``--compare`` tree,
    and each module of the checkout changed since its .pyc was written. That made a version's start 0.06 s
    slower than the same code compiled (measured 2026-12-08) and skewed before/after comparisons."""
    import compileall

    import maasctl

    for tree in (Path(maasctl.__file__).parent, *([Path(args.compare)] if getattr(args, "compare", None) else [])):
        if not compileall.compile_dir(str(tree), quiet=1):
            raise SystemExit(f"cannot byte-compile {tree}")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The reference's build, the objects and the rounds (shared with handover_bench.py)."""
    parser.add_argument("--reference", default=str(Path.home() / ".cache/maasctl/reference/manager"))
    parser.add_argument("--reference-crds", default=str(Path.home() / ".cache/maasctl/reference/crds"))
    parser.add_argument("--subs", type=int, default=300)
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--per-sub", type=int, default=3)
    parser.add_argument("--auth-policies", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--converge-limit", type=float, default=180.0)
    parser.add_argument("--keep", action="store_true", help="keep each round's folder (logs) in $TMPDIR")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cluster_arguments(parser)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after all Active before the stop")
    parser.add_argument("--observe", type=float, default=10.0, help="seconds of the restart whose requests count")
    parser.add_argument("--only", choices=("maasctl", "reference"))
    parser.add_argument("--compare", default=None,
                        help="PYTHONPATH of maasctl's code before a change: a third version, maasctl-before")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    if sys.argv[1:2] == ["--profile-until-working"]:
        profile_until_working(sys.argv[2], sys.argv[3:])
        return
    args = parser.parse_args()
    compile_maasctl(args)
    if args.one:
        print(json.dumps(asyncio.run(one(args.one, args))), flush=True)
        return
    versions = [args.only] if args.only else ["maasctl", "reference"]
    if args.compare:
        versions.insert(1, "maasctl-before")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
    for rnd in range(args.rounds):
        for name in versions if rnd % 2 == 0 else versions[::-1]:
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--one", name, *sys.argv[1:]],
                                  capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{name} round {rnd + 1} failed:\n{done.stderr[-4000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1]) | {"load": f"{load:.2f}-{os.getloadavg()[0]:.2f}"}
            results[name].append(r)
            print(f"# round {rnd + 1} {json.dumps(r)}", flush=True)
    print("| version | load per round | all Active at first start (s) | restart: until working (s) | "
          "its CPU until then (s) | restart writes | restart GETs | restart LISTs | "
          "a subscription created at the restart: Active after (s) | writes to converge the backlog |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in results.items():
        def each(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals = [r[key] for r in rs]
            shown = " / ".join("-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v) for v in vals)
            nums = [v for v in vals if v is not None]
            return f"{shown} (median {statistics.median(nums):.2f})" if nums else shown
        print(f"| {name} | {', '.join(r['load'] for r in rs)} | {each('all_active_s')} | {each('until_working_s')} | "
              f"{each('cpu_until_working_s')} | {each('restart_writes')} | {each('restart_gets')} | "
              f"{each('restart_lists')} | {each('new_subscription_active_s')} | {each('converge_writes')} |")


if __name__ == "__main__":
    main()
