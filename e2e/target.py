"""The cluster under test, as journeys see it: the same `Target` in both modes (docs/e2e.md).

- `E2E_CLUSTER=local` (default): the suite starts `maasctl.localstack.LocalStack` itself;
- `E2E_CLUSTER=external`: a cluster someone else started (kind with Kuadrant, a staging cluster, a second
  `maasctl dev`), described by `E2E_*` variables only (`e2e.config`).

What one mode has and the other may lack (the test model's request log, an admin token, maasctl's data plane)
is a `Need`: a journey asks for it with `World.require(...)` and is skipped with a reason naming what is
missing, never silently passed.
"""

from __future__ import annotations

import contextlib
import enum
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from kubernetes_asyncio import client as k8s

from e2e.cleanup import sweep
from e2e.config import ExternalConfig
from e2e.identities import Identities, StaticTokens, resolve_identities
from e2e.waits import DataPlane, MaasctlDataPlane, detect_data_plane, scaled, set_timeout_scale
from maasctl import samples
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY
from maasctl.runtime import Client, NotFound
from maasctl.runtime.connect import connect
from maasctl.settings import ControllerSettings
from maasctl.tls import default_tls

__all__ = ["LOCAL_SETTINGS", "TENANT_GATEWAY", "Need", "Target", "external_target", "local_target"]

TENANT_GATEWAY = ("maas-gateway", "maas-tenant-gateway")
"""A second Gateway the local stack's controller manages; journeys start its data plane when they need it."""
LOCAL_SETTINGS = ControllerSettings(gateway_name="maas-default-gateway", gateway_namespace="maas-gateway",
                                    tenant_gateways=("/".join(TENANT_GATEWAY),),
                                    leader_election_namespace="opendatahub", max_concurrent_reconciles=4)


class Need(enum.Enum):
    """Something a journey needs beyond URLs, kubeconfig and tokens; the value says how to provide it."""

    MODEL_REQUESTS = "the test model's request log (E2E_MODEL_REQUEST_LOG_URL)"
    INCLUSTER_MODEL = "a test model without upstream key for the in-cluster model (E2E_INCLUSTER_MODEL_URL)"
    ADMIN_TOKEN = "a maas-api administrator's token (E2E_ADMIN_TOKEN_FILE)"
    GATEWAY_TOKEN = "the gateway's token on maas-api's /internal/v1, e.g. usage ingest (E2E_GATEWAY_TOKEN_FILE)"
    CLEANUP_TOKEN = "the maas-key-cleanup ServiceAccount's token (E2E_KEY_CLEANUP_TOKEN_FILE)"
    MAASCTL_DATA_PLANE = "maasctl's data plane (`maasctl gateway`) in front of the models (its /_gateway API)"
    LOCAL_STACK = "the suite's own local stack (E2E_CLUSTER=local)"


@dataclass(frozen=True)
class _Options:
    upstream_key: str = field(repr=False)


@dataclass
class Target:
    """URLs, API access and identities of the cluster under test; `local` only in local mode."""

    mode: str
    run_id: str
    api: k8s.ApiClient
    kubeconfig: Path
    directory: Path  # the session's own files (logs of processes a journey starts); not the cluster's
    gateway_url: str
    api_url: str
    settings: ControllerSettings  # gateway_name, gateway_namespace, subscription_namespace
    model_url: str  # the test model demanding `upstream_key`, as the gateway reaches it
    upstream_key: str = field(repr=False)
    identities: Identities
    data_plane: DataPlane
    incluster_model_url: str | None = None
    model_requests_url: str | None = None  # GET -> the requests the test model received
    admin_token_file: Path | None = None
    gateway_token_file: Path | None = None
    cleanup_token_file: Path | None = None
    local: LocalStack | None = None

    @property
    def options(self) -> _Options:
        """`stack.options.upstream_key`, as on LocalStack."""
        return _Options(self.upstream_key)

    @property
    def client(self) -> Client:
        return Client(self.api)

    def missing(self, need: Need) -> bool:
        present = {
            Need.MODEL_REQUESTS: self.model_requests_url, Need.INCLUSTER_MODEL: self.incluster_model_url,
            Need.ADMIN_TOKEN: self.admin_token_file, Need.GATEWAY_TOKEN: self.gateway_token_file,
            Need.CLEANUP_TOKEN: self.cleanup_token_file, Need.LOCAL_STACK: self.local,
            Need.MAASCTL_DATA_PLANE: isinstance(self.data_plane, MaasctlDataPlane) or None,
        }
        return present[need] is None


@contextlib.asynccontextmanager
async def local_target() -> AsyncIterator[Target]:
    """Start the local stack (and the Gateway object a gateway controller would report on)."""
    with tempfile.TemporaryDirectory(prefix="maasctl-e2e-") as tmp:
        # E2E_PAYLOAD_PROCESSOR=1: the payload stages in a `maasctl payload-processor` process, over gRPC
        processor = os.environ.get("E2E_PAYLOAD_PROCESSOR", "") not in ("", "0")
        stack = LocalStack(StackOptions(directory=Path(tmp), settings=LOCAL_SETTINGS, controller_process=True,
                                        payload_processor=processor))
        await stack.start()
        try:
            client = Client(stack.api)
            port = int(stack.gateway_url.rsplit(":", 1)[1])
            await client.apply(samples.gateway(stack.settings, port), field_manager="e2e")
            for obj in samples.maas_api(stack.settings, stack.api_url):  # as `maasctl dev` and a cluster do
                await client.apply(obj, field_manager="e2e")
            await client.patch(GATEWAY, stack.settings.gateway_name, stack.settings.gateway_namespace,
                               samples.gateway_status(), subresource="status")
            tokens = StaticTokens({u.name: u.token for u in stack.control_plane.users.values()})
            directory = stack.directory
            set_timeout_scale(1.0)
            yield Target(
                mode="local", run_id=uuid.uuid4().hex[:8], api=stack.api, kubeconfig=stack.kubeconfig,
                directory=directory,
                gateway_url=stack.gateway_url, api_url=stack.api_url, settings=stack.settings,
                model_url=stack.model_url, upstream_key=stack.options.upstream_key,
                identities=await resolve_identities(client, tokens, {}),
                data_plane=MaasctlDataPlane(stack.gateway_url), incluster_model_url=stack.incluster_model_url,
                model_requests_url=f"{stack.model_url}/debug/requests", admin_token_file=stack.admin_token_file,
                gateway_token_file=directory / "gateway.token",
                cleanup_token_file=directory / "maas-key-cleanup.token", local=stack)
        finally:
            await stack.stop()


async def _check_reachable(config: ExternalConfig, client: Client) -> list[str]:
    """The problems that would make every journey fail, found before the first one runs."""
    problems = []
    settings = config.settings
    try:
        await client.get(GATEWAY, settings.gateway_name, settings.gateway_namespace)
    except NotFound:
        problems.append(f"Gateway {settings.gateway_namespace}/{settings.gateway_name} not found (set E2E_GATEWAY)")
    try:
        await k8s.CoreV1Api(client.api).read_namespace(settings.subscription_namespace)
    except k8s.ApiException:
        problems.append(f"subscription namespace {settings.subscription_namespace} not found "
                        "(set E2E_SUBSCRIPTION_NAMESPACE)")
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        for what, url in (("maas-api", f"{config.api_url}/health"), ("the gateway", config.gateway_url)):
            try:
                await http.get(url)
            except httpx.HTTPError as exc:
                problems.append(f"{what} at {url} does not answer: {exc!r}")
    return problems


@contextlib.asynccontextmanager
async def external_target(config: ExternalConfig) -> AsyncIterator[Target]:
    """Connect to a cluster described by `config`; at the end, remove what this run left behind."""
    api = await connect(str(config.kubeconfig))
    scratch = tempfile.TemporaryDirectory(prefix="maasctl-e2e-external-")
    try:
        client = Client(api)
        problems = await _check_reachable(config, client)
        if problems:
            raise RuntimeError("the external cluster is not usable:\n  " + "\n  ".join(problems))
        data_plane = await detect_data_plane(config.gateway_url, client, config.data_plane)
        set_timeout_scale(config.timeout_scale or data_plane.default_timeout_scale)
        target = Target(
            mode="external", run_id=uuid.uuid4().hex[:8], api=api, kubeconfig=config.kubeconfig,
            directory=Path(scratch.name),
            gateway_url=config.gateway_url, api_url=config.api_url, settings=config.settings,
            model_url=config.model_url, upstream_key=config.upstream_key,
            identities=await resolve_identities(client, config.tokens, config.groups), data_plane=data_plane,
            incluster_model_url=config.incluster_model_url, model_requests_url=config.model_requests_url,
            admin_token_file=config.admin_token_file, gateway_token_file=config.gateway_token_file,
            cleanup_token_file=config.cleanup_token_file)
        try:
            yield target
        finally:
            left = await sweep(client, target.run_id, config.settings.subscription_namespace, scaled(120))
            if left:
                raise RuntimeError(f"run {target.run_id} could not clean up (still there after {scaled(120):g}s): "
                                   + ", ".join(left))
    finally:
        await api.close()
        scratch.cleanup()
