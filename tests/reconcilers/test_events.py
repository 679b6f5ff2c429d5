"""Generated objects are announced with Normal events, one per verb and reconcile naming every object written;
problems with Warning events (events.k8s.io/v1)."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s

from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import external_model, publish_external, subscription, uid


async def events_for(kube: k8s.ApiClient, namespace: str, name: str) -> list[k8s.EventsV1Event]:
    listed = await k8s.EventsV1Api(kube).list_namespaced_event(namespace, field_selector=f"regarding.name={name}")
    return list(listed.items)


async def test_created_policy_is_announced_and_missing_secret_warned(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "ev")
    sub = f"ev-{uid()}"
    await objs.create(subscription(sub, [(namespace, "ev")], "free-users", 100))

    async def created_event() -> bool:  # the model's reconcile is the one writer of its policies
        return any(e.type == "Normal" and e.reason == "Created" and "TokenRateLimitPolicy" in (e.note or "")
                   for e in await events_for(kube, namespace, "ev"))

    await eventually(created_event)
    event = next(e for e in await events_for(kube, namespace, "ev")
                 if e.reason == "Created" and "TokenRateLimitPolicy" in (e.note or ""))
    assert event.reporting_controller == "maas-controller"
    assert event.regarding.kind == "MaaSModelRef"

    await objs.create(external_model(namespace, "broken", secret="does-not-exist"))

    async def warned() -> bool:
        return any(e.type == "Warning" and e.reason == "CredentialNotFound"
                   for e in await events_for(kube, namespace, "broken"))

    await eventually(warned)
    await objs.delete("MaaSSubscription", SUB_NS, sub)


async def test_objects_written_in_one_reconcile_are_announced_in_one_event(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "one")

    async def created() -> list[k8s.EventsV1Event] | None:
        found = [e for e in await events_for(kube, namespace, "one") if e.reason == "Created"
                 and "HTTPRoute" in (e.note or "")]
        return found or None

    events = await eventually(created)
    assert len(events) == 1  # the route and its backend Service, created together: one Event names both
    assert events[0].type == "Normal" and "Service " in events[0].note and events[0].regarding.kind == "MaaSModelRef"
    assert not [e for e in await events_for(kube, namespace, "one")
                if e.reason == "Created" and "Service " in (e.note or "") and "HTTPRoute" not in (e.note or "")]
