"""What the billing journeys share: waiting for a billing process's probes, a caller whose subscription belongs
to an organization (the key a TenantAccount's organization label matches), and a PriceBook + Plan at 0.02 a call
of the test model (10 prompt + 5 completion tokens at 1000 and 2000 per million)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from e2e.conftest import World, eventually
from maasctl.testenv.controlplane import ManagedProcess

__all__ = ["BILLING", "book_and_plan", "book_spec", "organization_key", "wait_probes"]

BILLING = "billing.opendatahub.io/v1alpha1"


async def wait_probes(proc: ManagedProcess, health_port: int) -> None:
    """Until the process's `/readyz` answers 200 (its log tail if it dies first)."""
    async def ready() -> bool:
        assert proc.alive(), proc.log_tail()
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                return (await http.get(f"http://127.0.0.1:{health_port}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    await eventually(ready, 60)


async def organization_key(world: World, org: str, sub_name: str) -> str:
    """alice's API key for model `gpt` through a subscription of organization `org`, once it is enforced."""
    await world.apply(*world.external_model("gpt"))
    sub = world.subscription(sub_name, {"gpt": [(10_000_000, "1m")]}, users=("alice",))
    sub["spec"]["organization"] = {"id": org}
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)), sub)
    await world.wait_active(sub_name)
    key = str((await world.mint("alice", subscription=sub_name))["key"])
    await world.wait_enforced("gpt", key)
    return key


def book_spec(effective: datetime) -> dict[str, Any]:
    """0.02 a call of the test model, in force from `effective` (no notice)."""
    return {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
            "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                      "rates": {"prompt_tokens": "1000", "completion_tokens": "2000"}}]}


def book_and_plan(world: World, book_name: str, plan_name: str, effective: datetime) -> list[dict[str, Any]]:
    """The PriceBook (`book_spec`) and a Plan on the stack's Gateway that uses it."""
    ns, gw = world.stack.settings.gateway_namespace, world.stack.settings.gateway_name
    return [{"apiVersion": BILLING, "kind": "PriceBook", "metadata": {"name": book_name, "namespace": ns},
             "spec": book_spec(effective)},
            {"apiVersion": BILLING, "kind": "Plan", "metadata": {"name": plan_name, "namespace": ns},
             "spec": {"limits": {"requestsPerMinute": 1000}, "priceBookRef": book_name,
                      "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw}}}]
