"""What the billing journeys share: `maasctl billing run` as its own process next to the local stack (with a ledger
of its own, SQLite in the stack's directory, rating maas-api's usage database), an organization's subscription to
the test model, and a tenant's PriceBook, Plan and TenantAccount."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
from kubernetes_asyncio import client as k8s

from e2e.conftest import World
from e2e.target import Target
from e2e.waits import eventually
from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.rules.catalog import charged_from
from maasctl.gateway.simulate import SimulateRequest, simulate_remote
from maasctl.localstack import LocalStack, maasctl_argv
from maasctl.testenv.controlplane import ManagedProcess, free_port
from maasctl.tls import default_tls

__all__ = ["BILLING", "billing_operator", "book_and_plan", "book_spec", "chargeable_from", "ledger_url",
           "org_subscription", "organization_key", "tenant_objects", "usage_url", "wait_allowance", "wait_probes"]

BILLING = "billing.opendatahub.io/v1alpha1"


def usage_url(stack: LocalStack) -> str:
    return stack.options.database_url or f"sqlite+aiosqlite:///{stack.directory / 'maas-api.db'}"


def ledger_url(stack: LocalStack) -> str:
    return f"sqlite+aiosqlite:///{stack.directory / 'billing-ledger.db'}"


@contextlib.asynccontextmanager
async def billing_operator(stack: Target, name: str, *, ledger: bool = True) -> AsyncIterator[ManagedProcess]:
    """The operator (with the ledger and maas-api's usage database unless `ledger` is false), ready (probes
    answer) before it is yielded."""
    await install_billing_crds(stack.api)
    health = free_port()
    args = ["billing", "run", f"--kubeconfig={stack.kubeconfig}", "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health}", "--log-format=json",
            f"--leader-election-namespace={stack.settings.leader_election_namespace}"]
    if ledger:
        assert stack.local is not None, "local_stack journey"
        args += [f"--ledger-url={ledger_url(stack.local)}", f"--usage-database-url={usage_url(stack.local)}",
                 "--rate-interval-seconds=1"]
    proc = ManagedProcess(name, maasctl_argv(*args), stack.directory / f"{name}.log")
    proc.start()
    try:
        await wait_probes(proc, health)
        yield proc
    finally:
        await asyncio.to_thread(proc.stop)


async def wait_probes(proc: ManagedProcess, health_port: int) -> None:
    """Until the process's `/readyz` answers 200 (its log tail if it dies first)."""
    async def ready() -> bool:
        assert proc.alive(), proc.log_tail()
        try:
            async with httpx.AsyncClient(timeout=2, verify=default_tls()) as http:
                return (await http.get(f"http://127.0.0.1:{health_port}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    await eventually(ready, 60)


async def org_subscription(world: World, name: str, org: str) -> None:
    """The external test model `gpt` and a subscription `name` of organization `org` for alice, active."""
    await world.apply(*world.external_model("gpt"))
    sub = world.subscription(name, {"gpt": [(10_000_000, "1m")]}, users=("alice",))
    sub["spec"]["organization"] = {"id": org}
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)), sub)
    await world.wait_active(name)


def tenant_objects(world: World, *, book: str, plan: str, tenant: str, org: str, book_spec: dict[str, Any],
                   limits: dict[str, int], billing_mode: str) -> list[dict[str, Any]]:
    """A PriceBook, a Plan on the stack's Gateway and the organization's TenantAccount pinned to the book."""
    ns, gw = world.stack.settings.gateway_namespace, world.stack.settings.gateway_name
    return [
        {"apiVersion": BILLING, "kind": "PriceBook", "metadata": {"name": book, "namespace": ns}, "spec": book_spec},
        {"apiVersion": BILLING, "kind": "Plan", "metadata": {"name": plan, "namespace": ns},
         "spec": {"limits": limits, "priceBookRef": book,
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}}},
        {"apiVersion": BILLING, "kind": "TenantAccount",
         "metadata": {"name": tenant, "namespace": ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Helix", "planRef": {"name": plan}, "billingMode": billing_mode,
                  "priceBookPin": book}},
    ]


async def organization_key(world: World, org: str, sub_name: str) -> str:
    """alice's API key for model `gpt` through a subscription of organization `org`, once it is enforced."""
    await org_subscription(world, sub_name, org)
    key = str((await world.mint("alice", subscription=sub_name))["key"])
    await world.wait_enforced("gpt", key)
    return key


def book_spec(effective: datetime) -> dict[str, Any]:
    """0.02 a call of the test model (10 prompt + 5 completion tokens at 1000 and 2000 per million), in force
    from `effective` (no notice)."""
    return {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
            "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                      "rates": {"prompt_tokens": "1000", "completion_tokens": "2000"}}]}


def book_and_plan(world: World, book_name: str, plan_name: str, effective: datetime) -> list[dict[str, Any]]:
    """The PriceBook (`book_spec`) and a Plan on the stack's Gateway that uses it."""
    return tenant_objects(world, book=book_name, plan=plan_name, tenant="", org="", book_spec=book_spec(effective),
                          limits={"requestsPerMinute": 1000}, billing_mode="")[:2]


async def chargeable_from(world: World, tenant: str, effective: datetime) -> None:
    """Sleep until a call is charged to TenantAccount `tenant` (in the gateway namespace): its
    PriceBook is in force (`effective`) and its creation second is over - a record made in that second predates
    the account, so it is showback, never charged (`catalog.TenantRef.predates`). Creating the objects can take
    more than the second a journey gives `effective` on a loaded machine (seen in whole runs: a budget journey's
    ledger held 29 of 37 calls)."""
    custom = k8s.CustomObjectsApi(world.stack.api)
    obj = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1",
                                                    world.stack.settings.gateway_namespace, "tenantaccounts", tenant)
    created = datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    start = max(effective, charged_from(created))
    await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds() + 0.1))


async def wait_allowance(world: World, key: str, gateway_url: str | None = None) -> None:
    """Until the gateway holds the Prepaid wallet's allowance limit for calls with `key` (`/_gateway/simulate`):
    a Plan reconcile turns the tenant's status into a TokenRateLimitPolicy after the tenant is Active, and a call
    served before the gateway has it is bounded only by the rater."""
    url = gateway_url or world.stack.gateway_url
    last = {"why": "not asked yet"}

    async def limited() -> bool:
        try:
            report = await simulate_remote(url, SimulateRequest(model=f"{world.namespace}/gpt", key=key))
        except RuntimeError as exc:  # the gateway's answer was not 200
            last["why"] = str(exc)
            return False
        last["why"] = f"limits {report.limits}"[:600]
        return any("/allowance/" in str(x.get("limit_name") or x) for x in report.limits)

    await eventually(limited, 60, describe=lambda: last["why"])
