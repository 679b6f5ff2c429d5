"""Billing journey over real HTTP: a tenant's Plan is compiled by `maasctl billing run` (its own process) into
Kuadrant policies on the shared Gateway, and the local data plane enforces them next to the MaaS policies:
the tenant's requests are counted per tenant (429 past requestsPerMinute, for every user of the organization),
models outside its modelScopes are refused (403), and another organization is not affected."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from e2e.billing_operator import billing_operator
from e2e.conftest import MAAS, World, eventually
from e2e.target import Target
from maasctl.gateway.simulate import SimulateRequest, simulate_remote
from maasctl.testenv.controlplane import ManagedProcess

BILLING = "billing.opendatahub.io/v1alpha1"
# Starts its own billing operator next to the stack; a cluster someone else runs has its own (maasctl dev too).
pytestmark = pytest.mark.local_stack


@pytest.fixture(scope="module")
async def billing_process(stack: Target) -> AsyncIterator[ManagedProcess]:
    """`maasctl billing run` against the stack's control plane, ready (probes answer) before the journey."""
    async with billing_operator(stack, "billing", ledger=False) as proc:
        yield proc


def subscription(world: World, name: str, users: tuple[str, ...], org: str) -> dict[str, Any]:
    obj = world.subscription(name, {"gpt": [(1000000, "1m")], "hidden": [(1000000, "1m")]}, users=users)
    obj["spec"]["organization"] = {"id": org}
    return obj


async def test_a_tenants_plan_limits_answer_429_through_the_gateway(billing_process: ManagedProcess,
                                                                      world: World) -> None:
    ns, stack = world.namespace, world.stack
    gw_ns, gw = stack.settings.gateway_namespace, stack.settings.gateway_name
    hidden = {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "hidden", "namespace": ns},
              "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}}
    await world.apply(*world.external_model("gpt"), hidden)
    acme_org, other_org = world.name("acme"), world.name("other")
    acme, other = world.name("acme-sub"), world.name("other-sub")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt", "hidden"], users=("alice", "bob", "carol")),
                      subscription(world, acme, ("alice", "carol"), acme_org),
                      subscription(world, other, ("bob",), other_org))
    await world.wait_active(acme, other)
    alice = (await world.mint("alice", subscription=acme))["key"]
    carol = (await world.mint("carol", subscription=acme))["key"]
    bob = (await world.mint("bob", subscription=other))["key"]
    await world.wait_enforced("gpt", alice)
    await world.wait_enforced("hidden", bob)

    plan_name, tenant_name = world.name("basic"), world.name("ten-acme")
    plan = {"apiVersion": BILLING, "kind": "Plan", "metadata": {"name": plan_name, "namespace": gw_ns},
            "spec": {"limits": {"requestsPerMinute": 3}, "modelScopes": ["gpt"],
                     "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}}}
    tenant = {"apiVersion": BILLING, "kind": "TenantAccount",
              "metadata": {"name": tenant_name, "namespace": gw_ns,
                           "labels": {"billing.opendatahub.io/organization-id": acme_org}},
              "spec": {"displayName": "Acme", "planRef": {"name": plan_name}, "billingMode": "ShowbackOnly"}}
    await world.apply(tenant, plan)
    custom = k8s.CustomObjectsApi(stack.api)
    try:
        async def compiled() -> bool:
            obj = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", gw_ns, "plans",
                                                            plan_name)
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
            return conds.get("Compiled", {}).get("status") == "True"

        await eventually(compiled)

        # The scope rule reaches the gateway: acme's users may use gpt only.
        async def scoped() -> bool:
            return (await world.chat("hidden", alice)).status_code == 403

        await eventually(scoped)

        # The request limit comes in a RateLimitPolicy of its own, which can reach the gateway after the scope rule's
        # AuthPolicy: a call served before it would not count.
        async def request_limited(credential: str) -> bool:
            report = await simulate_remote(stack.gateway_url, SimulateRequest(model=f"{ns}/gpt", key=credential))
            return bool(report.request_limits)

        for credential in (alice, carol):
            await eventually(functools.partial(request_limited, credential))
        denied = await world.chat("hidden", carol)
        assert denied.status_code == 403

        # requestsPerMinute counts per tenant: alice's calls, then carol's (same organization), reach the limit.
        statuses = []
        for _ in range(12):
            resp = await world.chat("gpt", alice if len(statuses) % 2 == 0 else carol)
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                break
        assert statuses[-1] == 429 and set(statuses[:-1]) == {200} and len(statuses) <= 4, statuses
        assert 1 <= int(resp.headers["retry-after"]) <= 60
        message = resp.json()["error"]["message"]
        assert message.startswith("request limit 3 per 1m exceeded: ") and "billing Plan" in message  # names the Plan
        assert (await world.chat("gpt", carol)).status_code == 429

        # Another organization is not on the Plan: no request limit, no model scope.
        assert [(await world.chat("gpt", bob)).status_code for _ in range(5)] == [200] * 5
        assert (await world.chat("hidden", bob)).status_code == 200
    finally:
        for plural, name in (("plans", plan_name), ("tenantaccounts", tenant_name)):
            await custom.delete_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", gw_ns, plural, name)
