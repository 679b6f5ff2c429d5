"""Writing the status of an object that was deleted meanwhile ends the work quietly (no error, no retry)."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s

from maasctl.app import manager_options
from maasctl.reconcilers.context import Context
from maasctl.runtime import Manager
from maasctl.testenv import ControlPlane
from tests.reconcilers.conftest import SETTINGS, SUB_NS, Objects
from tests.reconcilers.test_core_flow import subscription, uid


async def test_status_of_a_subscription_deleted_meanwhile_is_the_end_of_the_work(
    maas_cluster: ControlPlane, kube: k8s.ApiClient, objs: Objects
) -> None:
    name = f"gone-{uid()}"
    await objs.create(subscription(name, [("llm", "m")], "free-users"))
    obj = await objs.get("MaaSSubscription", SUB_NS, name)
    assert obj is not None
    await objs.delete("MaaSSubscription", SUB_NS, name)
    assert await objs.get("MaaSSubscription", SUB_NS, name) is None
    manager = Manager(kube, manager_options(SETTINGS))
    ctx = Context(cache=manager.cache, client=manager.client, applier=manager.applier,
                  events=manager.event_recorder("maas-controller"), settings=SETTINGS)
    await ctx.write_status(obj, {"phase": "Active"})  # the object is gone: no exception, nothing written
    assert await objs.get("MaaSSubscription", SUB_NS, name) is None
