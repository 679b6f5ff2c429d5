"""Drop-in II (#37) items decided at admission and in events, as a client or manifest written for the reference
meets them on the running stack: where MaaS objects are accepted (and what the refusal tells), a model listed
twice in one subscription (refused, saying why), a subscription turned Failed (no longer served), and the
reference's `ModelNameConflictResolved` Event when two MaaSModelRefs stop publishing one name."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from e2e.conftest import MAAS, World, eventually
from kubernetes_asyncio import client as k8s

from maasctl.reconcilers.kinds import MAAS_AUTH_POLICY, MAAS_MODEL_REF, MAAS_SUBSCRIPTION
from maasctl.runtime.errors import ApiError, NotFound

from .helpers import chat_body, gateway
from .test_models import renamed_model


async def _refusal(world: World, obj: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await world.apply(obj)
    return caught.value


async def test_maas_objects_outside_the_subscription_namespace_are_refused_saying_where_they_go(
        world: World) -> None:
    sub = world.subscription(world.name("elsewhere"), {"chat": [(100, "1m")]}, users=("alice",))
    sub["metadata"]["namespace"] = world.namespace  # a model namespace, not the subscription namespace
    policy = world.auth_policy(world.name("ap-elsewhere"), ["chat"], users=("alice",))
    policy["metadata"]["namespace"] = world.namespace
    for obj in (sub, policy):
        err = await _refusal(world, obj)
        assert err.status in (403, 422), err
        assert f"only accepted in the subscription namespace {world.sub_ns()}" in err.message, err.message
        assert f"not in {world.namespace}" in err.message and "docs/install.md" in err.message, err.message
        kind = MAAS_SUBSCRIPTION if obj["kind"] == "MaaSSubscription" else MAAS_AUTH_POLICY
        with pytest.raises(NotFound):  # nothing stored
            await world.client.get(kind, obj["metadata"]["name"], world.namespace)


async def test_a_model_listed_twice_in_one_subscription_is_refused_saying_which(world: World) -> None:
    """The reference deduplicates; maasctl refuses (which entry's limits would win is the caller's to say)."""
    for kind, obj in (("MaaSSubscription", world.subscription(world.name("twice"), {"chat": [(100, "1m")]},
                                                               users=("alice",))),
                      ("MaaSAuthPolicy", world.auth_policy(world.name("twice"), ["chat"], users=("alice",)))):
        obj["spec"]["modelRefs"].append(copy.deepcopy(obj["spec"]["modelRefs"][0]))
        with pytest.raises(ApiError) as created:  # `kubectl apply` / `create` of a new object
            await world.client.create(obj, field_manager="e2e-operator")
        assert created.value.status == 422, (kind, created.value)
        assert "modelRefs" in created.value.message and "Duplicate value" in created.value.message, kind
        applied = await _refusal(world, obj)  # `kubectl apply --server-side`: the API server's own wording
        assert "modelRefs" in applied.message and "duplicate entries" in applied.message, (kind, applied)
        with pytest.raises(NotFound):
            await world.client.get(MAAS_SUBSCRIPTION if kind == "MaaSSubscription" else MAAS_AUTH_POLICY,
                                   obj["metadata"]["name"], obj["metadata"]["namespace"])


async def test_a_subscription_turned_failed_is_no_longer_served(world: World) -> None:
    ns = world.namespace
    sub, key, _ = await renamed_model(world)
    path = f"/{ns}/chat/v1/chat/completions"
    headers = {"Authorization": f"Bearer {key}"}
    assert (await gateway(world, "POST", path, json=chat_body("company-chat"), headers=headers)).status_code == 200
    # the key's subscription now names only a model that does not exist: Failed, and the key is refused
    obj = world.subscription(sub, {f"gone-{uuid.uuid4().hex[:6]}": [(100, "1m")]}, users=("alice",))
    await world.apply(obj)

    async def failed() -> bool:
        got = await world.client.get(MAAS_SUBSCRIPTION, sub, world.sub_ns())
        return bool((got.get("status") or {}).get("phase") == "Failed")

    await eventually(failed)

    async def refused() -> bool:
        r = await gateway(world, "POST", path, json=chat_body("company-chat"), headers=headers)
        return r.status_code in (401, 403)

    await eventually(refused)


async def test_a_cleared_model_name_conflict_gets_the_references_normal_event(world: World) -> None:
    ns = world.namespace
    await renamed_model(world)  # MaaSModelRef `chat` publishes company-chat
    twin = {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "chat-twin", "namespace": ns},
            "spec": {"modelRef": {"kind": "ExternalModel", "name": "company-chat"}}}
    await world.apply(twin)

    async def unique(state: str) -> bool:
        got = await world.client.get(MAAS_MODEL_REF, "chat", ns)
        conds = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or ()}
        return bool((conds.get("ModelIdentityUnique") or {}).get("status") == state)

    await eventually(lambda: unique("False"))
    await world.client.delete(MAAS_MODEL_REF, "chat-twin", ns)
    await eventually(lambda: unique("True"))

    async def resolved() -> list[k8s.EventsV1Event]:
        listed = await k8s.EventsV1Api(world.stack.api).list_namespaced_event(
            ns, field_selector="regarding.name=chat")
        return [e for e in listed.items if e.reason == "ModelNameConflictResolved"]

    await eventually(resolved)
    events = await resolved()
    assert [e.type for e in events] == ["Normal"] and "company-chat" in (events[0].note or "")
