"""The freeze latency measurement of `billing_ledger_bench.py --freeze`: the local stack with
`maasctl billing run` (ledger + maas-api's usage database), a Prepaid tenant calling until it is refused."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
from kubernetes_asyncio import client as k8s

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.conftest import SETTINGS, World, eventually

from maasctl import samples
from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.ledger import Ledger, credit
from maasctl.localstack import LocalStack, StackOptions, maasctl_argv
from maasctl.reconcilers.kinds import GATEWAY
from maasctl.runtime import Client
from maasctl.testenv.controlplane import ManagedProcess, free_port

API = "billing.opendatahub.io/v1alpha1"


async def one_run(world: World, ledger: Ledger) -> tuple[float, float]:
    stack = world.stack
    gw_ns, gw = stack.settings.gateway_namespace, stack.settings.gateway_name
    suffix = uuid.uuid4().hex[:6]
    org, sub, tenant, plan, book = (f"{x}-{suffix}" for x in ("org", "sub", "ten", "plan", "pb"))
    obj = world.subscription(sub, {"gpt": [(10_000_000, "1m")]}, users=("alice",))
    obj["spec"]["organization"] = {"id": org}
    await world.apply(world.auth_policy(f"ap-{suffix}", ["gpt"], users=("alice",)), obj)
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced("gpt", key)
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    await world.apply(
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": book, "namespace": gw_ns},
         "spec": {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
                  "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                            "rates": {"prompt_tokens": "1000", "completion_tokens": "2000"}}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": plan, "namespace": gw_ns},
         "spec": {"limits": {}, "priceBookRef": book,
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": tenant, "namespace": gw_ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "t", "planRef": {"name": plan}, "billingMode": "Prepaid", "priceBookPin": book}})
    tenant_key = f"{gw_ns}/{tenant}"
    await asyncio.sleep(max(0.0, (effective - datetime.now(UTC)).total_seconds() + 0.1))
    await ledger.post([credit(f"bench-{suffix}", tenant_key, datetime.now(UTC), Decimal("0.05"), reason="bench",
                              actor="bench")])
    custom = k8s.CustomObjectsApi(stack.api)

    async def active() -> bool:
        obj = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", gw_ns,
                                                        "tenantaccounts", tenant)
        return bool((obj.get("status") or {}).get("state") == "Active")

    await eventually(active, 60)
    refused_at = None
    for _ in range(2000):
        resp = await world.chat("gpt", key)
        if resp.status_code == 403:
            refused_at = datetime.now(UTC)
            break
        await asyncio.sleep(0.05)
    assert refused_at is not None
    entries = sorted(await ledger.entries(tenant_key, limit=10_000), key=lambda e: e.id)
    balance = Decimal(0)
    for e in entries:
        balance += e.amount
        if balance < 0:
            record_time = e.occurred_at
            return (refused_at - e.recorded_at).total_seconds(), (refused_at - record_time).total_seconds()
    raise AssertionError("the balance never crossed zero")


async def freeze_runs(runs: int) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="maasctl-bench-") as tmp:
        stack = LocalStack(StackOptions(directory=Path(tmp), settings=SETTINGS, controller_process=True))
        await stack.start()
        billing: ManagedProcess | None = None
        ledger_url = f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}"
        try:
            client = Client(stack.api)
            port = int(stack.gateway_url.rsplit(":", 1)[1])
            await client.apply(samples.gateway(stack.settings, port), field_manager="bench")
            await client.patch(GATEWAY, SETTINGS.gateway_name, SETTINGS.gateway_namespace, samples.gateway_status(),
                               subresource="status")
            await install_billing_crds(stack.api)
            usage_url = stack.options.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'maas-api.db'}"
            health = free_port()
            billing = ManagedProcess("billing", maasctl_argv(
                "billing", "run", f"--kubeconfig={stack.kubeconfig}", "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{health}", "--log-format=json",
                f"--leader-election-namespace={stack.settings.leader_election_namespace}",
                f"--ledger-url={ledger_url}", f"--usage-database-url={usage_url}", "--rate-interval-seconds=1"),
                Path(tmp) / "billing.log")
            billing.start()

            async def ready() -> bool:
                try:
                    async with httpx.AsyncClient(timeout=2) as http:
                        return (await http.get(f"http://127.0.0.1:{health}/readyz")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(ready, 60)
            namespace = f"bench-{uuid.uuid4().hex[:6]}"
            await k8s.CoreV1Api(stack.api).create_namespace(
                k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
            world = World(stack, namespace, "bench")
            await world.apply(*world.external_model("gpt"))
            ledger = Ledger.from_url(ledger_url)
            await ledger.create_schema()
            try:
                out: list[tuple[float, float]] = []
                for _ in range(runs):
                    out.append(await one_run(world, ledger))
                return out
            finally:
                await ledger.close()
        finally:
            if billing is not None:
                await asyncio.to_thread(billing.stop)
            await stack.stop()

