"""A daily limit of several billion tokens works end to end (one bound shared by the CRD and the builders)."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s

from maasctl.subscription_cli import render
from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import publish_external, uid
from tests.test_subscription_cli import args


async def test_a_daily_limit_of_billions_works_end_to_end(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The CRD admits up to 10^12 per tier and the policy builder uses the same bound: the subscription
    goes Active and its TokenRateLimitPolicy carries the limit."""
    await publish_external(objs, kube, namespace, "big")
    name = f"big-{uid()}"
    obj = render(args(name=name, model=[f"{namespace}/big"], limit=["100M per Hour", "5B per Day"],
                      group=["premium-users"]))
    await objs.create(obj)

    async def limited() -> bool:
        sub = await objs.get("MaaSSubscription", SUB_NS, name)
        trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-big")
        if not sub or (sub.get("status") or {}).get("phase") != "Active" or not trlp:
            return False
        rates = trlp["spec"]["limits"][f"{SUB_NS}-{name}-big-tokens"]["rates"]  # the reference's key
        return bool(rates == [{"limit": 100_000_000, "window": "1h"}, {"limit": 5_000_000_000, "window": "24h"}])

    await eventually(limited)
    await objs.delete("MaaSSubscription", SUB_NS, name)
