"""The whole product on one machine: a real local control plane, the test model, maas-api, the local data
plane and the controller, each a separate process talking HTTP (the controller may run in-process).

Used by `maasctl dev` (the README's main command) and by the e2e suite. There is no kubelet, so the
subscription key cleanup Jobs are run by the test-only JobRunner in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import structlog
from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane, TestUser
from maasctl.testenv.controlplane import ManagedProcess, default_users, free_port
from maasctl.testenv.guardrails import EngineRunner, check_command, engine_venv
from maasctl.testenv.jobrunner import DEFAULT_MANAGED_BY, JobRunner
from maasctl.testenv.seed import third_party_seed
from maasctl.tls import default_tls

log = structlog.get_logger("maasctl.localstack")

CLEANUP_SA = "maas-key-cleanup"
ADMIN_SA = "maas-admin"
IN_CLUSTER_SERVED_NAME = "kserve-llm"
"""A model name the in-cluster test model serves besides the usual ones (manifests/e2e/testmodels.yaml too):
the served name of the e2e journey's LLMInferenceService on the base URL."""
ADMIN_ROLE_RULES = [{"apiGroups": ["maas.opendatahub.io"], "resources": ["maasauthpolicies"], "verbs": ["create"]}]


@dataclass(frozen=True, kw_only=True)
class StackOptions:
    """Ports 0 pick free ones. `controller_process` False runs the controller in the caller's loop."""

    directory: Path
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    gateway_port: int = 0
    api_port: int = 0
    model_port: int = 0
    incluster_model_port: int = 0
    controller_process: bool = True
    database_url: str | None = None
    model_names: tuple[str, ...] = ("gpt-x", "granite")
    upstream_key: str = "dev-upstream-key"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    extra_users: tuple[TestUser, ...] = ()  # token-file users besides alice, bob and carol
    extra_apiserver_flags: tuple[str, ...] = ()  # e.g. --oidc-* for the console's OIDC sign-in
    redis_url: str | None = None  # the gateway's token counters in Redis (shared with `add_gateway` replicas)
    # Guardrails: run the engine Deployment the controller renders (the real NeMo Guardrails server, from the
    # virtualenv hack/setup-guardrails.sh installs) when it is installed; the test models double as guard
    # models: a Yes-or-No question mentioning a block word is answered Yes (block).
    guardrails: bool = True
    guard_block_words: tuple[str, ...] = ("FORBIDDEN",)
    model_replies: tuple[tuple[str, str], ...] = (("tell me the code", "the code is FORBIDDEN"),)
    model_latency: float = 0.0  # seconds each test-model completion takes (load benchmarks)
    # The gateway plays Envoy + Authorino + Limitador only and hands the payload stages to a `maasctl
    # payload-processor` process over gRPC (ext_proc), as in a cluster; False runs every stage in the gateway.
    payload_processor: bool = False
    # worker processes of the gateway (and of the payload processor): more than 1 needs `redis_url`
    workers: int = 1


@dataclass(frozen=True)
class ProcessorEndpoints:
    """The ports of a `maasctl payload-processor` started by the stack (loopback)."""

    grpc_port: int
    metrics_port: int
    relay_port: int

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def relay(self) -> str:
        return f"127.0.0.1:{self.relay_port}"


def maasctl_argv(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("maasctl")), *args]


class LocalStack:
    """`await start()`, use `gateway_url` / `api_url` / `model_url` / `control_plane`, then `await stop()`."""

    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.directory = options.directory.resolve()
        users = {u.name: u for u in (*default_users(), *options.extra_users)}
        self.control_plane = ControlPlane(directory=self.directory / "controlplane", users=users,
                                          extra_apiserver_flags=options.extra_apiserver_flags)
        self.processes: dict[str, ManagedProcess] = {}
        self.gateway_url = self.api_url = self.model_url = self.incluster_model_url = ""
        self.health_url = ""
        self.processor_health_url = ""  # the payload processor's /healthz, /readyz, /metrics (when it runs)
        self.settings = options.settings
        self._tasks: list[asyncio.Task[Any]] = []
        self._api: k8s.ApiClient | None = None
        self.admin_token_file: Path | None = None
        self._gateway_token = self.directory / "gateway.token"
        self.engine: EngineRunner | None = None

    @property
    def api(self) -> k8s.ApiClient:
        assert self._api is not None, "stack not started"
        return self._api

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    async def start(self) -> LocalStack:
        opts = self.options
        self.directory.mkdir(parents=True, exist_ok=True)
        self.control_plane.etcd_seed = await asyncio.to_thread(third_party_seed)  # the CRDs come with etcd's data
        await asyncio.to_thread(self.control_plane.start)
        try:
            await self._start(opts)
        except BaseException:
            await self.stop()
            raise
        return self

    async def _start(self, opts: StackOptions) -> None:
        self._api = await connect(str(self.kubeconfig))
        await install_crds(self.api, subscription_namespace=self.settings.subscription_namespace,
                           with_finalizer_policy=True, namespaces=self.settings.namespaces)
        core = k8s.CoreV1Api(self.api)
        for ns in {self.settings.subscription_namespace, self.settings.gateway_namespace,
                   self.settings.leader_election_namespace, "llm"}:
            with contextlib.suppress(k8s.ApiException):
                await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        cleanup_token, self.admin_token_file = await self._identities()

        ports = {name: port or free_port() for name, port in
                 (("model", opts.model_port), ("api", opts.api_port), ("gateway", opts.gateway_port),
                  ("incluster", opts.incluster_model_port))}
        self.model_url = f"http://127.0.0.1:{ports['model']}"
        self.incluster_model_url = f"http://127.0.0.1:{ports['incluster']}"
        self.api_url = f"http://127.0.0.1:{ports['api']}"
        self.gateway_url = f"http://127.0.0.1:{ports['gateway']}"
        self.settings = dataclasses.replace(
            self.settings, kubeconfig=str(self.kubeconfig), maas_api_url=self.api_url,
            cleanup_job_managed_by=DEFAULT_MANAGED_BY, metrics_bind_address="0",
            health_probe_bind_address="0",
        )
        venv = engine_venv() if opts.guardrails else None
        guard_args: list[str] = []
        if venv is not None:
            self.engine = EngineRunner(Client(self.api), self.settings.subscription_namespace, venv,
                                       self.directory / "guardrails")
            self.settings = dataclasses.replace(self.settings, guardrails_check_command=check_command(venv))
            guard_args.append(f"--guardrails-url={self.engine.url}")
        model_args = [f"--model={m}" for m in opts.model_names]
        usage_args = [f"--prompt-tokens={opts.prompt_tokens}", f"--completion-tokens={opts.completion_tokens}",
                      *(f"--block-word={w}" for w in opts.guard_block_words),
                      *(f"--reply={m}={a}" for m, a in opts.model_replies),
                      *([f"--latency={opts.model_latency}"] if opts.model_latency > 0 else [])]
        # An external provider demanding the upstream key the gateway injects, and an in-cluster model.
        self._spawn("testmodel", "testmodel", f"--port={ports['model']}", *model_args, *usage_args,
                    env={"MAASCTL_TESTMODEL_REQUIRE_BEARER": opts.upstream_key,
                         "MAASCTL_TESTMODEL_REQUIRE_API_KEY": opts.upstream_key})
        # the in-cluster model also serves IN_CLUSTER_SERVED_NAME, a name only an LLMInferenceService publishes
        # on the base URL (no sample or provider does)
        self._spawn("incluster-model", "testmodel", f"--port={ports['incluster']}", *model_args,
                    f"--model={IN_CLUSTER_SERVED_NAME}", *usage_args)
        database = opts.database_url or f"sqlite+aiosqlite:///{self.directory / 'maas-api.db'}"
        gateway_token = self._gateway_token  # the gateway's credential on maas-api's /internal
        gateway_token.write_text(secrets.token_urlsafe(32))
        gateway_token.chmod(0o600)
        cleanup_user = f"system:serviceaccount:{self.settings.leader_election_namespace}:{CLEANUP_SA}"
        self._spawn("maas-api", "api", f"--port={ports['api']}", f"--database-url={database}",
                    f"--kubeconfig={self.kubeconfig}",
                    f"--subscription-namespace={self.settings.subscription_namespace}",
                    f"--gateway-name={self.settings.gateway_name}",
                    f"--gateway-namespace={self.settings.gateway_namespace}",
                    f"--gateway-token-file={gateway_token}", f"--key-cleanup-user={cleanup_user}",
                    f"--gateway-url={self.gateway_url}",
                    "--log-format=json")
        processor: list[str] = []
        if opts.payload_processor:
            endpoints = self._spawn_processor("payload-processor", opts.redis_url, opts.workers)
            self.processor_health_url = endpoints.health_url
            # models with several providers are routed to the processor's provider relay
            self.settings = dataclasses.replace(self.settings, provider_relay=endpoints.relay)
            processor = self._front_argv(endpoints)
        self._spawn("gateway", *self._gateway_argv("gateway", ports["gateway"], opts.redis_url, workers=opts.workers),
                    *processor)
        if opts.controller_process:
            health = free_port()
            self.health_url = f"http://127.0.0.1:{health}"
            self._spawn("controller", "run", *controller_flags(self.settings),
                        f"--health-probe-bind-address=127.0.0.1:{health}", "--log-format=json")
        await self._wait_http(f"{self.model_url}/health", "testmodel")
        await self._wait_http(f"{self.incluster_model_url}/health", "incluster-model")
        await self._wait_http(f"{self.api_url}/health", "maas-api")
        await self._wait_http(f"{self.gateway_url}/_gateway/readyz", "gateway")
        if self.processor_health_url:
            await self._wait_http(f"{self.processor_health_url}/readyz", "payload-processor")
        if self.health_url:
            await self._wait_http(f"{self.health_url}/readyz", "controller")
        runner = JobRunner(Client(self.api), namespace=self.settings.leader_election_namespace,
                           env={"MAASCTL_MAAS_API_TOKEN_FILE": str(cleanup_token)})
        self._tasks.append(asyncio.create_task(runner.run(), name="job-runner"))
        if self.engine is not None:
            self._tasks.append(asyncio.create_task(self.engine.run(), name="guardrails-engine"))

    def spool_dir(self, name: str) -> Path:
        """The usage spool of the gateway process `name` (each replica has its own; a restarted one reuses it)."""
        return self.directory / "usage-spool" / name

    def _gateway_argv(self, name: str, port: int, redis_url: str | None, usage_url: str | None = None,
                      gateway: tuple[str, str] | None = None, workers: int = 1) -> list[str]:
        gw_namespace, gw_name = gateway or (self.settings.gateway_namespace, self.settings.gateway_name)
        argv = ["gateway", f"--port={port}", f"--kubeconfig={self.kubeconfig}",
                f"--gateway-name={gw_name}", f"--gateway-namespace={gw_namespace}",
                f"--subscription-namespace={self.settings.subscription_namespace}",
                f"--maas-api-url={self.api_url}", f"--usage-url={usage_url or self.api_url}",
                f"--usage-spool-dir={self.spool_dir(name)}",
                f"--maas-api-token-file={self._gateway_token}", "--log-format=json"]
        if self.engine is not None:
            argv.append(f"--guardrails-url={self.engine.url}")
        if workers > 1:
            argv.append(f"--workers={workers}")
        return [*argv, f"--redis-url={redis_url}"] if redis_url else argv

    async def add_gateway(self, name: str, redis_url: str | None = None, *, usage_url: str | None = None,
                          gateway: tuple[str, str] | None = None, workers: int = 1,
                          processor: ProcessorEndpoints | None = None) -> str:
        """Another gateway replica for the same Gateway (same policies, same maas-api); its URL once ready.
        Replicas given the same `redis_url` share token counters, as in a scaled-out deployment. `usage_url`
        replaces maas-api's URL for usage records only (e.g. an unreachable one); the replica's usage spool is
        `spool_dir(name)`, so a replica started again under the same name sends what the earlier one left.
        `gateway` (namespace, name) makes it the data plane of another (tenant) Gateway instead: one listener
        per Gateway. `workers`: that many worker processes on its port (needs `redis_url`). `processor`: it plays
        Envoy in front of that payload processor (`add_processor`)."""
        port = free_port()
        self._spawn(name, *self._gateway_argv(name, port, redis_url, usage_url, gateway, workers),
                    *(self._front_argv(processor) if processor is not None else ()))
        url = f"http://127.0.0.1:{port}"
        await self._wait_http(f"{url}/_gateway/readyz", name)
        return url

    def _spawn_processor(self, name: str, redis_url: str | None, workers: int = 1) -> ProcessorEndpoints:
        endpoints = ProcessorEndpoints(free_port(), free_port(), free_port())
        argv = self._gateway_argv(name, endpoints.grpc_port, redis_url, workers=workers)
        argv[0] = "payload-processor"
        self._spawn(name, *argv, f"--metrics-port={endpoints.metrics_port}", f"--relay-port={endpoints.relay_port}")
        return endpoints

    def _front_argv(self, endpoints: ProcessorEndpoints) -> list[str]:
        """The flags of a gateway that plays Envoy in front of the processor at `endpoints`."""
        return [f"--payload-processor=grpc://127.0.0.1:{endpoints.grpc_port}",
                f"--payload-processor-metrics-url={endpoints.health_url}/metrics",
                *(f"--payload-processor-bypass-route={r}" for r in self.settings.payload_processor_bypass_routes)]

    async def add_processor(self, name: str, redis_url: str | None = None, *, workers: int = 1) -> ProcessorEndpoints:
        """Another payload processor for the stack's Gateway (its usage spool `spool_dir(name)`), once ready;
        `add_gateway(..., processor=...)` puts a gateway in front of it."""
        endpoints = self._spawn_processor(name, redis_url, workers)
        await self._wait_http(f"{endpoints.health_url}/readyz", name)
        return endpoints

    async def _identities(self) -> tuple[Path, Path]:
        """Token files of two ServiceAccounts: the key cleanup Job's (no RBAC at all: maas-api lets it revoke
        the keys of a subscription being deleted, nothing else) and an operator's (a maas-api admin through the
        `create maasauthpolicies` check in the subscription namespace), standing in for pod token mounts."""
        ns, sub_ns = self.settings.leader_election_namespace, self.settings.subscription_namespace
        client = Client(self.api)
        binding = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "maas-admin"}
        for obj in (
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CLEANUP_SA, "namespace": ns}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ADMIN_SA, "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "maas-admin", "namespace": sub_ns}, "rules": ADMIN_ROLE_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "maas-admin", "namespace": sub_ns}, "roleRef": binding,
             "subjects": [{"kind": "ServiceAccount", "name": ADMIN_SA, "namespace": ns}]},
        ):
            await client.apply(obj, field_manager="maasctl-localstack")
        paths = []
        for sa in (CLEANUP_SA, ADMIN_SA):
            request = await k8s.CoreV1Api(self.api).create_namespaced_service_account_token(
                sa, ns, k8s.AuthenticationV1TokenRequest(
                    spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=86400)))
            path = self.directory / f"{sa}.token"
            path.write_text(request.status.token)
            path.chmod(0o600)
            paths.append(path)
        return paths[0], paths[1]

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        proc = ManagedProcess(name, maasctl_argv(*args), self.directory / f"{name}.log", env=env)
        proc.start()
        self.processes[name] = proc

    async def _wait_http(self, url: str, name: str, timeout: float = 60.0) -> None:
        proc = self.processes.get(name)
        deadline = asyncio.get_running_loop().time() + timeout
        async with httpx.AsyncClient(timeout=2.0, verify=default_tls()) as http:
            while True:
                if proc is not None and not proc.alive():
                    raise RuntimeError(f"{name} exited during start-up:\n{proc.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                if asyncio.get_running_loop().time() > deadline:
                    tail = proc.log_tail() if proc else ""
                    raise RuntimeError(f"{name} not ready at {url} after {timeout}s\n{tail}")
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for proc in reversed(list(self.processes.values())):
            await asyncio.to_thread(proc.stop)
        if self._api is not None:
            await self._api.close()
        await asyncio.to_thread(self.control_plane.stop)


def controller_flags(settings: ControllerSettings) -> list[str]:
    """`maasctl run` flags that reproduce `settings` in a child process."""
    flags = [
        f"--kubeconfig={settings.kubeconfig}",
        f"--maas-api-url={settings.maas_api_url}",
        f"--gateway-name={settings.gateway_name}",
        f"--gateway-namespace={settings.gateway_namespace}",
        *(f"--tenant-gateway={gw}" for gw in settings.tenant_gateways),
        f"--subscription-namespace={settings.subscription_namespace}",
        f"--leader-election-namespace={settings.leader_election_namespace}",
        f"--max-concurrent-reconciles={settings.max_concurrent_reconciles}",
        f"--metrics-bind-address={settings.metrics_bind_address}",
        f"--cleanup-job-managed-by={settings.cleanup_job_managed_by}",
        f"--guardrails-engine-url={settings.guardrails_engine_url}",
        f"--guardrails-check-command={' '.join(settings.guardrails_check_command)}",
        f"--guardrails-engine-image={settings.guardrails_engine_image}",
        f"--provider-relay={settings.provider_relay}",
    ]
    return flags
