"""A new subscription's first status waits for its limit in the model's shared policy (one write, not two),
and only so long: a policy that never carries the limit is reported after the hold."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from maasctl.builders.refs import ObjectRef
from maasctl.reconcilers.status import ModelOutcome
from maasctl.reconcilers.statushold import HOLD_SECONDS, FirstStatusHold, only_held
from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import publish_external, subscription, uid

PENDING = {"NotFound", "LimitNotRendered"}
MANAGED = "opendatahub.io/managed"


async def _published(objs: Objects, kube: k8s.ApiClient, namespace: str, name: str) -> None:
    await publish_external(objs, kube, namespace, name)

    async def ready() -> bool:
        mr = await objs.get("MaaSModelRef", namespace, name)
        return bool(mr and (mr.get("status") or {}).get("phase") == "Ready")

    await eventually(ready)


async def _record(kube: k8s.ApiClient, names: set[str], seen: dict[str, list[list[str]]]) -> None:
    """Per subscription in `names`: the policy reasons of every status version written (from a watch)."""
    w = watch.Watch()
    async with w:
        async for event in w.stream(k8s.CustomObjectsApi(kube).list_namespaced_custom_object,
                                    "maas.opendatahub.io", "v1alpha1", SUB_NS, "maassubscriptions",
                                    timeout_seconds=120):
            obj = event["object"]
            status = obj.get("status") or {}
            if obj["metadata"]["name"] in names and status:
                reasons = [s["reason"] for s in status.get("tokenRateLimitStatuses") or ()]
                versions = seen.setdefault(obj["metadata"]["name"], [])
                if not versions or versions[-1] != reasons:
                    versions.append(reasons)


async def _frozen_policy(objs: Objects, kube: k8s.ApiClient, namespace: str, model: str) -> str:
    """A published model whose policy we stop writing (opted out); returns the subscription that created it."""
    await _published(objs, kube, namespace, model)
    first = f"first-{uid()}"
    await objs.create(subscription(first, [(namespace, model)], "g"))
    await eventually(lambda: objs.get("TokenRateLimitPolicy", namespace, f"maas-trlp-{model}"))
    await objs.patch("TokenRateLimitPolicy", namespace, f"maas-trlp-{model}",
                     {"metadata": {"annotations": {MANAGED: "false"}}})
    return first


async def test_subscriptions_are_first_written_once_their_limit_is_rendered(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The policy lags (opted out) while four subscriptions are created, and catches up within the hold."""
    first = await _frozen_policy(objs, kube, namespace, "m")
    names = {f"burst-{uid()}" for _ in range(4)}
    seen: dict[str, list[list[str]]] = {}
    recorder = asyncio.create_task(_record(kube, names, seen))
    try:
        await asyncio.sleep(0.2)  # the watch is open
        await asyncio.gather(*(objs.create(subscription(n, [(namespace, "m")], "g", 100 + i))
                               for i, n in enumerate(sorted(names))))
        await asyncio.sleep(1.0)
        await objs.patch("TokenRateLimitPolicy", namespace, "maas-trlp-m",
                         {"metadata": {"annotations": {MANAGED: "true"}}})  # rendered again, with their limits

        async def all_reported() -> bool:
            return all(seen.get(n) and not PENDING & set(seen[n][-1]) for n in names)

        await eventually(all_reported)
        assert seen == {n: [["AcceptedUnknown"]] for n in names}  # never a status without its limit
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recorder
        for n in (*names, first):
            await objs.delete("MaaSSubscription", SUB_NS, n)


async def test_a_limit_that_is_never_rendered_is_reported_after_the_hold(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    first = await _frozen_policy(objs, kube, namespace, "frozen")
    sub = f"late-{uid()}"
    await objs.create(subscription(sub, [(namespace, "frozen")], "g"))

    async def reported() -> list[str]:
        obj = await objs.get("MaaSSubscription", SUB_NS, sub)
        return [s["reason"] for s in ((obj or {}).get("status") or {}).get("tokenRateLimitStatuses") or ()]

    assert await eventually(reported, timeout=HOLD_SECONDS + 20) == ["LimitNotRendered"]
    for name in (sub, first):
        await objs.delete("MaaSSubscription", SUB_NS, name)


# -- the rule, on its own -------------------------------------------------------------------------------------
def _sub(generation: int = 1, observed: int | None = None) -> dict[str, Any]:
    status = {} if observed is None else {"observedGeneration": observed}
    return {"metadata": {"namespace": "s", "name": "a", "generation": generation}, "status": status}


def _outcome(reason: str, ok: bool = True) -> ModelOutcome:
    model = ObjectRef("llm", "m")
    return ModelOutcome(model, True, "Valid" if ok else "Invalid", "", ObjectRef("llm", "maas-trlp-m"), False,
                        reason)


def test_only_our_own_pending_render_of_an_unreported_generation_is_held() -> None:
    now = [100.0]
    hold = FirstStatusHold(seconds=5.0, clock=lambda: now[0])
    assert hold.remaining(_sub(), [_outcome("LimitNotRendered")]) == 5.0
    assert hold.remaining(_sub(), [_outcome("AcceptedUnknown"), _outcome("NotFound")]) == 5.0
    missing = ModelOutcome(ObjectRef("llm", "gone"), False, "NotFound", "no such model")
    for outcomes in ([_outcome("AcceptedUnknown")], [_outcome("Enforced")], [_outcome("LimitNotRendered", False)],
                     [missing], [_outcome("LimitNotRendered"), missing],
                     [_outcome("LimitNotRendered"), _outcome("Enforced", False)]):
        assert hold.remaining(_sub(generation=2), outcomes) is None, outcomes
    assert hold.remaining(_sub(generation=3, observed=3), [_outcome("LimitNotRendered")]) is None
    assert len(hold) == 0  # each "write now" forgot the object


def test_the_hold_ends_at_its_deadline_and_starts_again_for_a_new_generation() -> None:
    now = [0.0]
    hold = FirstStatusHold(seconds=5.0, clock=lambda: now[0])
    pending = [_outcome("LimitNotRendered")]
    assert hold.remaining(_sub(), pending) == 5.0
    now[0] = 3.0
    assert hold.remaining(_sub(), pending) == 2.0
    now[0] = 5.0
    assert hold.remaining(_sub(), pending) is None  # written now, whatever it says
    hold.forget("s", "a")
    assert hold.remaining(_sub(generation=2, observed=1), pending) == 5.0  # the next generation: a new hold
    assert len(hold) == 1
    hold.forget("s", "a")
    assert len(hold) == 0


def test_a_policy_update_is_passed_on_at_once_only_to_the_held() -> None:
    from maasctl.runtime import Request

    hold = FirstStatusHold(seconds=5.0, clock=lambda: 0.0)
    lookups: list[object] = []

    def subscriptions_on_policy(obj: object) -> list[Request]:
        lookups.append(obj)
        return [Request("s", "a"), Request("s", "b")]

    on_policy = only_held(subscriptions_on_policy, hold)
    assert on_policy({}) == [] and lookups == []  # nothing held: the lookup is not run at all
    assert hold.remaining(_sub(), [_outcome("LimitNotRendered")]) == 5.0  # s/a is held
    assert on_policy({}) == [Request("s", "a")] and len(lookups) == 1
    hold.forget("s", "a")
    assert on_policy({}) == [] and len(lookups) == 1
