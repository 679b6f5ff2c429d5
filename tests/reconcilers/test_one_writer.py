"""One writer per generated object: sources created in the same instant never race each other's limits away.

Every version of the model's TokenRateLimitPolicy is recorded from a watch; once a subscription's limit is in
the policy it must stay in every later version while the subscription exists (with one writer per source,
a reconcile from an older cache snapshot could overwrite a newer one and drop a limit for a while).
"""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import publish_external, subscription, uid


async def _record(kube: k8s.ApiClient, namespace: str, name: str, history: list[frozenset[str]]) -> None:
    api = k8s.CustomObjectsApi(kube)
    w = watch.Watch()
    async with w:
        async for event in w.stream(api.list_namespaced_custom_object, "kuadrant.io", "v1alpha1", namespace,
                                    "tokenratelimitpolicies", field_selector=f"metadata.name={name}",
                                    timeout_seconds=120):
            obj = event["object"]
            limits = frozenset((obj.get("spec") or {}).get("limits") or {})
            history.append(frozenset() if event["type"] == "DELETED" else limits)


def _never_lost(history: list[frozenset[str]]) -> list[str]:
    """Keys that were in some version and missing from a later one."""
    seen: set[str] = set()
    lost: list[str] = []
    for version in history:
        lost.extend(sorted(seen - version))
        seen |= version
    return lost


async def test_subscriptions_created_at_once_are_all_in_every_later_policy_version(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    models = ["m1", "m2"]
    for m in models:
        await publish_external(objs, kube, namespace, m) if m == "m1" else await objs.create({
            "apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
            "metadata": {"name": m, "namespace": namespace},
            "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}})
    histories: dict[str, list[frozenset[str]]] = {m: [] for m in models}
    recorders = [asyncio.create_task(_record(kube, namespace, f"maas-trlp-{m}", histories[m])) for m in models]
    created: list[str] = []
    try:
        for _ in range(3):
            batch = [f"race-{uid()}" for _ in range(4)]
            await asyncio.gather(*(objs.create(subscription(s, [(namespace, m) for m in models], "g", 100 + i))
                                   for i, s in enumerate(batch)))
            created.extend(batch)
            want = {m: {f"{SUB_NS}-{s}-{m}-tokens" for s in created} for m in models}

            async def complete(want: dict[str, set[str]] = want) -> bool:
                return all(h and want[m] <= h[-1] for m, h in histories.items())

            await eventually(complete)
        for model, history in histories.items():
            assert _never_lost(history) == [], f"{model}: a limit disappeared from a later version: {history}"
            assert history[-1] == {f"{SUB_NS}-{s}-{model}-tokens" for s in created}
    finally:
        for task in recorders:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for s in created:
            await objs.delete("MaaSSubscription", SUB_NS, s)


def test_the_history_check_catches_a_lost_limit() -> None:
    a, b = "ns/a", "ns/b"
    assert _never_lost([frozenset({a}), frozenset({a, b}), frozenset({a, b})]) == []
    assert _never_lost([frozenset({a}), frozenset({a, b}), frozenset({b}), frozenset({a, b})]) == [a]


