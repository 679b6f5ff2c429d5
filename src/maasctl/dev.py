"""`maasctl dev`: the README's main command. Starts the local stack (control plane, test model, maas-api,
local gateway), runs the controller in the foreground, creates the sample resources and prints where to look.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import structlog

from maasctl import samples
from maasctl.app import run_controller, stop_on_signals
from maasctl.billing.dev.stack import start_billing
from maasctl.console.billing import rbac as billing_rbac
from maasctl.console.localrun import start_console
from maasctl.contract.billing_console import ROLE_FLAGS, Role
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY, LLM_INFERENCE_SERVICE
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all
from maasctl.settings import ControllerSettings
from maasctl.testenv import TestUser
from maasctl.testenv.controlplane import free_port

log = structlog.get_logger("maasctl.dev")
FIELD_MANAGER = "maasctl-dev"
DEV_ADMIN = "admin"  # a token-file user in the console's administrator group
ADMIN_GROUP = "maas-admins"
# The console's billing pages (docs/billing-console.md): the dev administrator is a billing admin.
BILLING_ROLES: dict[Role, tuple[str, ...]] = {"admin": (ADMIN_GROUP,)}


@dataclass(frozen=True, kw_only=True)
class DevOptions:
    directory: Path
    gateway_port: int = 8000
    api_port: int = 8090
    console_port: int = 8095
    model_port: int = 0  # 0: a free port (the test models' URLs are in the sample objects)
    incluster_model_port: int = 0
    samples: bool = True
    billing_probe_address: str = "0"  # the billing operator's /readyz and /metrics ("0": not served)
    payload_processor: bool = False  # the payload stages in their own process, over gRPC (StackOptions)


async def apply_samples(stack: LocalStack) -> None:
    """Create the sample models, auth policy and subscriptions (server-side apply: idempotent)."""
    client = Client(stack.api)
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    objs = [samples.gateway(stack.settings, port), *samples.access(stack.settings),
            *samples.models(stack.settings, stack.model_url, stack.incluster_model_url)]
    await apply_all(client, objs, field_manager=FIELD_MANAGER)  # the kinds were installed a moment ago
    gw = stack.settings
    await client.patch(GATEWAY, gw.gateway_name, gw.gateway_namespace, samples.gateway_status(),
                       subresource="status")
    await client.patch(LLM_INFERENCE_SERVICE, samples.IN_CLUSTER_MODEL, samples.MODEL_NAMESPACE,
                       samples.llm_ready_status(stack.gateway_url), subresource="status")


def write_tokens(stack: LocalStack, path: Path) -> None:
    """Tokens of the local test users, in a file (never printed or logged)."""
    lines = [f"export {u.name.upper()}_TOKEN={u.token}" for u in stack.control_plane.users.values()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def billing_console_args(probe_address: str, api_url: str | None = None) -> tuple[str, ...]:
    """The console's billing flags in `maasctl dev`: the roles, the tenant portal and the billing operator's portal
    API (`api_url`), and its /metrics when it is served (`--billing-probe-address`; without it the metering health
    page says the rater's figures are missing)."""
    args = tuple(f"{ROLE_FLAGS[role]}={g}" for role, groups in BILLING_ROLES.items() for g in groups)
    if api_url:
        args += ("--tenant-portal", f"--billing-api-url={api_url}")
    if probe_address and probe_address != "0":
        host, _, port = probe_address.rpartition(":")
        args += (f"--billing-metrics-url=http://{host if host not in ('', '0.0.0.0') else '127.0.0.1'}:{port}/metrics",)
    return args


def banner(stack: LocalStack, directory: Path, console_url: str, billing: str = "") -> str:
    kubeconfig, tokens = directory / "kubeconfig", directory / "tokens.env"
    ns = samples.MODEL_NAMESPACE
    return f"""
maasctl dev is running (Ctrl-C stops everything). Logs of the other processes: {directory}/*.log

  export KUBECONFIG={kubeconfig}     # kubectl get maasmodelrefs,maassubscriptions -A
  source {tokens}                     # ALICE_TOKEN (premium-users), BOB_TOKEN (free-users), CAROL_TOKEN,
                                      # ADMIN_TOKEN (maas-admins: the console's administrator pages)

  maas-api   {stack.api_url}
  gateway    {stack.gateway_url}
  console    {console_url}    # sign in with $ADMIN_TOKEN (a MaaS administrator) or $ALICE_TOKEN
  billing    {console_url}/billing    # $ADMIN_TOKEN is a billing admin too: tenants, PriceBooks, Plans, budgets, health
  portal     {console_url}/portal     # $ALICE_TOKEN: alice (premium-users) is a user of tenant ten-acme, her wallet

  # mint an API key bound to alice's best subscription, then call a model through the gateway:
  KEY=$(curl -s -X POST {stack.api_url}/v1/api-keys -H "Authorization: Bearer $ALICE_TOKEN" \\
        -H 'Content-Type: application/json' -d '{{"name": "demo"}}' \\
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
  curl -s {stack.gateway_url}/{ns}/{samples.EXTERNAL_MODEL}/v1/chat/completions \\
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
        -d '{{"model": "{samples.EXTERNAL_MODEL}", "messages": [{{"role": "user", "content": "hi"}}]}}'
  curl -s {stack.api_url}/v1/models -H "Authorization: Bearer $KEY"
  .venv/bin/maasctl simulate --gateway-url {stack.gateway_url} --model {ns}/{samples.EXTERNAL_MODEL} --key "$KEY"
{billing}
"""


async def run_dev(settings: ControllerSettings, options: DevOptions) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    directory = options.directory.resolve()
    shutil.rmtree(directory / "controlplane", ignore_errors=True)
    # A fresh control plane and maas-api: the billing ledger (and the connector's payment book in it) starts afresh
    # too, so every run tells the same story (welcome credit, charges, reloads) and no reload limit carries over.
    for db in ("maas-api.db", "billing-ledger.db", "billing-ledger.db-wal", "billing-ledger.db-shm"):
        (directory / db).unlink(missing_ok=True)
    admin = TestUser(DEV_ADMIN, secrets.token_urlsafe(24), (ADMIN_GROUP, "system:authenticated"))
    stack = LocalStack(StackOptions(
        directory=directory, settings=settings, gateway_port=options.gateway_port, api_port=options.api_port,
        model_port=options.model_port, incluster_model_port=options.incluster_model_port, controller_process=False,
        extra_users=(admin,), payload_processor=options.payload_processor))
    log.info("starting the local stack", directory=str(directory))
    await stack.start()
    try:
        shutil.copyfile(stack.kubeconfig, directory / "kubeconfig")
        (directory / "kubeconfig").chmod(0o600)
        write_tokens(stack, directory / "tokens.env")
        # The controller runs here, with the metrics and health probe addresses the user asked for.
        controller = asyncio.create_task(run_controller(dataclasses.replace(
            stack.settings, metrics_bind_address=settings.metrics_bind_address,
            health_probe_bind_address=settings.health_probe_bind_address), stop))
        # maas-api on the gateway (`/maas-api/v1`, `GET /v1/models` on the base URL), as in a cluster
        await apply_all(Client(stack.api), samples.maas_api(stack.settings, stack.api_url),
                        field_manager=FIELD_MANAGER)
        if options.samples:
            await apply_samples(stack)
        # Billing (seed 002): its controller and samples, in the Gateway's namespace (maasctl.billing.dev.stack).
        portal_port = free_port()  # the tenant portal's read API (docs/billing-console.md)
        billing = await start_billing(stack, str(stack.kubeconfig), stack.settings.gateway_namespace,
                                      stack.settings.gateway_name, stop, samples_on=options.samples,
                                      probe_address=options.billing_probe_address,
                                      portal_api_address=f"127.0.0.1:{portal_port}",
                                      subscription_namespace=stack.settings.subscription_namespace)
        await apply_all(Client(stack.api), [*billing_rbac.cluster_roles(), *billing_rbac.role_bindings(BILLING_ROLES)],
                        field_manager=FIELD_MANAGER)  # as the operator binds them from a BillingConsole
        console_url = await start_console(stack, options.console_port, admin_groups=(ADMIN_GROUP,),
                                          extra_args=billing_console_args(options.billing_probe_address,
                                                                          f"http://127.0.0.1:{portal_port}"),
                                          model_namespace=samples.MODEL_NAMESPACE)
        print(banner(stack, directory, console_url, billing.hints), flush=True)
        try:
            return await controller
        finally:
            stop.set()
            await billing.wait()
    finally:
        await stack.stop()
