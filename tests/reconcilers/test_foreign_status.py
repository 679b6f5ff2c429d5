"""Another controller writing the status of a generated object costs maasctl nothing: no apply, no Event.

On a real cluster Kuadrant accepts every AuthPolicy and TokenRateLimitPolicy and the gateway accepts every
HTTPRoute by writing their status. The no-op guard compares only the fields maasctl's field manager owns, so
those writes must not cause a re-apply (1 write per generated object per change) nor an "Updated" Event
that would not be true. The test writes such statuses as those controllers would, then waits until the
controller's cache holds them and every work queue is idle: a re-apply or an Event would have happened by
then (both are written inside the reconcile the status write triggers).
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s

from maasctl.reconcilers.kinds import AUTH_POLICY, HTTP_ROUTE, TOKEN_RATE_LIMIT_POLICY
from maasctl.runtime import GroupVersionKind
from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import auth_policy, publish_external, subscription, uid
from tests.reconcilers.test_events import events_for


def _idle(controller: RunningController) -> bool:
    return all(len(c.queue) == 0 and c.queue.processing_count() == 0 for c in controller.manager.controllers)


async def _cached_at(controller: RunningController, gvk: GroupVersionKind, ns: str, name: str, rv: str) -> bool:
    live = controller.manager.cache.peek(gvk, name, ns)
    return live is not None and live["metadata"]["resourceVersion"] == rv


def _conditions(generation: int, *types: str) -> list[dict[str, Any]]:
    return [{"type": t, "status": "True", "reason": t, "message": f"{t} by the test",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation} for t in types]


async def test_foreign_status_on_generated_objects_causes_no_apply_and_no_event(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "fs")
    sub = f"fs-{uid()}"
    await objs.create(subscription(sub, [(namespace, "fs")], "team-fs", 100))
    await objs.create(auth_policy(sub, [(namespace, "fs")], ["team-fs"]))
    try:
        async def generated() -> list[dict[str, Any]] | None:
            mr = await objs.get("MaaSModelRef", namespace, "fs")
            trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-fs")
            auth = await objs.get("AuthPolicy", namespace, "maas-auth-fs")
            routes = ((mr or {}).get("status") or {}).get("httpRoutes") or []
            if not (trlp and auth and routes and f"{SUB_NS}-{sub}-fs-tokens" in trlp["spec"].get("limits", {})):
                return None
            route = await objs.get("HTTPRoute", namespace, routes[0]["name"])
            return [trlp, auth, route] if route else None

        trlp, auth, route = await eventually(generated)
        await eventually(lambda: _async(_idle(controller)))
        applier = controller.manager.applier
        object_writes, skipped = applier.writes - applier.status_writes, applier.skipped
        updated_before = [e.metadata.name for e in await events_for(kube, namespace, "fs") if e.reason == "Updated"]

        # What Kuadrant and the gateway controller write (with their own field managers, on /status).
        policy_status = {"status": {"observedGeneration": 1, "conditions": _conditions(1, "Accepted", "Enforced")}}
        written = [
            (TOKEN_RATE_LIMIT_POLICY, trlp["metadata"]["name"],
             await objs.patch_status("TokenRateLimitPolicy", namespace, trlp["metadata"]["name"], policy_status)),
            (AUTH_POLICY, auth["metadata"]["name"],
             await objs.patch_status("AuthPolicy", namespace, auth["metadata"]["name"], policy_status)),
            (HTTP_ROUTE, route["metadata"]["name"], await objs.patch_status(
                "HTTPRoute", namespace, route["metadata"]["name"], {"status": {"parents": [{
                    "parentRef": route["spec"]["parentRefs"][0], "controllerName": "example.test/gateway",
                    "conditions": _conditions(route["metadata"]["generation"], "Accepted", "ResolvedRefs")}]}})),
        ]
        for gvk, name, obj in written:
            await eventually(lambda gvk=gvk, name=name, obj=obj: _cached_at(  # type: ignore[misc]
                controller, gvk, namespace, name, obj["metadata"]["resourceVersion"]))
        # The subscription reports the policy as enforced: the status write reached its reconcile too.
        async def reported() -> bool:
            s = await objs.get("MaaSSubscription", SUB_NS, sub)
            statuses = ((s or {}).get("status") or {}).get("tokenRateLimitStatuses") or []
            return bool(statuses) and all(st.get("ready") for st in statuses)

        await eventually(reported)
        await eventually(lambda: _async(_idle(controller)))

        assert applier.skipped > skipped  # the reconciles ran, and found nothing to apply
        # Statuses of the MaaS objects may change (the policy is now enforced); no generated object is applied.
        assert applier.writes - applier.status_writes == object_writes
        for gvk, name, obj in written:
            live = await objs.get(gvk.kind, namespace, name)
            assert live is not None
            assert live["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"], f"{gvk.kind} rewritten"
        updated_after = [e.metadata.name for e in await events_for(kube, namespace, "fs") if e.reason == "Updated"]
        assert updated_after == updated_before
    finally:
        await objs.delete("MaaSSubscription", SUB_NS, sub)
        await objs.delete("MaaSAuthPolicy", SUB_NS, sub)


async def _async(value: bool) -> bool:
    return value
