"""The client against the real API server: CRUD, typed errors, patches, SSA field ownership, discovery."""

from __future__ import annotations

from typing import Any

import pytest

from maasctl.runtime import (
    Applier,
    Cache,
    CacheOptions,
    Change,
    Client,
    Conflict,
    GroupVersionKind,
    Invalid,
    NotFound,
    add_finalizer,
    remove_finalizer,
)
from maasctl.runtime.client import JSON_PATCH
from maasctl.runtime.events import EVENT, EventRecorder

from .helpers import CONFIG_MAP, config_map, eventually

pytestmark = pytest.mark.integration


async def test_crud_and_typed_errors(client: Client, namespace: str) -> None:
    created = await client.create(config_map("a", namespace, {"k": "v"}, labels={"app": "x"}))
    assert (await client.get(CONFIG_MAP, "a", namespace))["data"] == {"k": "v"}
    with pytest.raises(Conflict):
        await client.create(config_map("a", namespace))
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "missing", namespace)
    with pytest.raises(Invalid) as invalid:
        await client.create(config_map("Not_Valid", namespace))
    assert any(c.field == "metadata.name" for c in invalid.value.causes)

    await client.patch(CONFIG_MAP, "a", namespace, {"data": {"k2": "v2"}})
    await client.patch(CONFIG_MAP, "a", namespace, [{"op": "remove", "path": "/data/k"}], content_type=JSON_PATCH)
    assert (await client.get(CONFIG_MAP, "a", namespace))["data"] == {"k2": "v2"}

    await client.create(config_map("b", namespace))
    listed = await client.list(CONFIG_MAP, namespace, label_selector="app=x")
    assert [o["metadata"]["name"] for o in listed.items] == ["a"]
    assert listed.items[0]["kind"] == "ConfigMap" and listed.resource_version

    with pytest.raises(Conflict):
        await client.delete(CONFIG_MAP, "a", namespace, uid="00000000-0000-0000-0000-000000000000")
    await client.delete(CONFIG_MAP, "a", namespace, uid=created["metadata"]["uid"])
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "a", namespace)


async def test_requests_are_counted_by_code_and_method(client: Client, namespace: str) -> None:
    await client.create(config_map("a", namespace))
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "missing", namespace)
    reg = client._metrics.registry  # type: ignore[union-attr]
    host = client._host
    assert reg.get_sample_value("rest_client_requests_total", {"code": "201", "method": "POST", "host": host}) == 1
    assert reg.get_sample_value("rest_client_requests_total", {"code": "404", "method": "GET", "host": host}) == 1


async def test_discovery_knows_served_kinds(client: Client) -> None:
    assert await client.mapper.is_served(CONFIG_MAP)
    assert await client.mapper.is_served(GroupVersionKind("gateway.networking.k8s.io", "v1", "HTTPRoute"))
    assert not await client.mapper.is_served(GroupVersionKind("example.invalid", "v1", "Nothing"))
    info = await client.mapper.resource_for(GroupVersionKind("apps", "v1", "Deployment"))
    assert info.plural == "deployments" and info.namespaced and "status" in info.subresources


async def test_server_side_apply_owns_fields(client: Client, namespace: str) -> None:
    desired = config_map("a", namespace, {"x": "1", "y": "2"})
    first = await client.apply(desired, field_manager="ctl")
    second = await client.apply(desired, field_manager="ctl")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    await client.patch(CONFIG_MAP, "a", namespace, {"data": {"theirs": "t"}}, field_manager="someone")
    del desired["data"]["y"]
    third = await client.apply(desired, field_manager="ctl")
    assert third["data"] == {"x": "1", "theirs": "t"}  # our removed field is gone, theirs stays


async def test_applier_skips_unchanged_objects_without_a_request(client: Client, namespace: str) -> None:
    import asyncio

    cache = Cache(client, CacheOptions(namespaces=(namespace,), keep_managed_fields_for=frozenset({"ctl"})))
    cache.informer(CONFIG_MAP)
    applier = Applier(client, cache, field_manager="ctl", status_field_manager="ctl-status")
    task = asyncio.create_task(cache.run())
    try:
        assert await cache.wait_for_sync(deadline=30)
        desired = config_map("a", namespace, {"x": "1"}, labels={"l": "v"})
        applied = await applier.apply(desired)
        rv = applied["metadata"]["resourceVersion"]
        await eventually(
            lambda: (cache.get(CONFIG_MAP, "a", namespace) or {}).get("metadata", {}).get("resourceVersion") == rv
        )
        for _ in range(3):
            await applier.apply(desired)
        assert (applier.writes, applier.skipped) == (1, 3)
        assert (await client.get(CONFIG_MAP, "a", namespace))["metadata"]["resourceVersion"] == rv

        desired["metadata"]["labels"] = {}  # drop a field: must write, and the server must drop it
        out = await applier.apply(desired)
        assert applier.writes == 2
        assert "labels" not in out["metadata"] or not out["metadata"]["labels"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_applier_says_created_once_while_its_cache_lags(client: Client, namespace: str) -> None:
    """A second reconcile can apply again before the cache has seen the first write (here: a cache that never
    watches ConfigMaps). That is a server-side no-op, not a second creation; a real change is an update."""
    applier = Applier(client, Cache(client, CacheOptions(namespaces=(namespace,))), field_manager="ctl",
                      status_field_manager="ctl-status")
    desired = config_map("lag", namespace, {"x": "1"})
    assert await applier.apply_change(desired) is Change.CREATED
    assert await applier.apply_change(desired) is Change.NONE
    assert await applier.apply_change(config_map("lag", namespace, {"x": "2"})) is Change.UPDATED
    assert await applier.apply_change(config_map("lag", namespace, {"x": "2"})) is Change.NONE
    assert (await client.get(CONFIG_MAP, "lag", namespace))["data"] == {"x": "2"}
    # Someone else's change after our write is still no creation of ours.
    await client.patch(CONFIG_MAP, "lag", namespace, {"data": {"theirs": "t"}}, field_manager="someone")
    assert await applier.apply_change(config_map("lag", namespace, {"x": "3"})) is Change.UPDATED


async def test_finalizers_never_clobber_and_never_readd_during_deletion(client: Client, namespace: str) -> None:
    obj = await client.create(config_map("a", namespace, finalizers=["other.io/keep"]))
    added = await add_finalizer(client, obj, "mine.io/cleanup")
    assert added is not None
    assert added["metadata"]["finalizers"] == ["other.io/keep", "mine.io/cleanup"]
    assert await add_finalizer(client, added, "mine.io/cleanup") is None  # already there: no write

    # A stale copy must not clobber a finalizer added meanwhile by someone else.
    await client.patch(
        CONFIG_MAP,
        "a",
        namespace,
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "third.io/x"}],
        content_type=JSON_PATCH,
    )
    stale = dict(obj)
    with pytest.raises(Exception):  # noqa: B017 - the server rejects the failed test op
        await add_finalizer(client, stale, "fourth.io/y")
    live = await client.get(CONFIG_MAP, "a", namespace)
    assert live["metadata"]["finalizers"] == ["other.io/keep", "mine.io/cleanup", "third.io/x"]

    await client.delete(CONFIG_MAP, "a", namespace)
    deleting = await client.get(CONFIG_MAP, "a", namespace)
    assert deleting["metadata"].get("deletionTimestamp")
    removed = await remove_finalizer(client, deleting, "mine.io/cleanup")
    assert removed is not None
    assert await add_finalizer(client, removed, "mine.io/cleanup") is None  # never re-added while deleting
    assert (await client.get(CONFIG_MAP, "a", namespace))["metadata"]["finalizers"] == ["other.io/keep", "third.io/x"]
    live = await client.get(CONFIG_MAP, "a", namespace)
    for fin in ("other.io/keep", "third.io/x"):
        live = await remove_finalizer(client, live, fin) or live
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "a", namespace)


async def test_event_recorder_deduplicates(client: Client, namespace: str) -> None:
    obj = await client.create(config_map("a", namespace))
    now = [0.0]
    recorder = EventRecorder(client, controller="example.io/ctl", instance="test", clock=lambda: now[0])
    for _ in range(50):
        await recorder.record(obj, type_="Warning", reason="Broken", action="Reconcile", note="same")
    await recorder.record(obj, type_="Normal", reason="Fixed", action="Reconcile")
    events = (await client.list(EVENT, namespace)).items
    assert sorted(e["reason"] for e in events) == ["Broken", "Fixed"]
    assert recorder.writes == 2
    assert events[0]["regarding"]["uid"] == obj["metadata"]["uid"]

    now[0] = 31.0  # a still-hot loop is summarised at most once per series interval
    for _ in range(10):
        await recorder.record(obj, type_="Warning", reason="Broken", action="Reconcile", note="same")
    assert recorder.writes == 3
    broken = [e for e in (await client.list(EVENT, namespace)).items if e["reason"] == "Broken"]
    assert len(broken) == 1 and broken[0]["series"]["count"] == 51


async def test_status_is_applied_with_its_own_field_manager(
    client: Client, namespace: str, widget: GroupVersionKind
) -> None:
    import asyncio

    def obj(**fields: Any) -> dict[str, Any]:
        return {
            "apiVersion": widget.api_version,
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": namespace},
            **fields,
        }

    cache = Cache(client, CacheOptions(namespaces=(namespace,), keep_managed_fields_for=frozenset({"ctl", "ctl-st"})))
    cache.informer(widget)
    applier = Applier(client, cache, field_manager="ctl", status_field_manager="ctl-st")
    task = asyncio.create_task(cache.run())
    try:
        assert await cache.wait_for_sync(deadline=30)
        spec = await applier.apply(obj(spec={"size": 1}))
        assert spec["metadata"]["generation"] == 1
        status = obj(status={"phase": "Ready", "observedGeneration": 1})
        after_status = await applier.apply_status(status)
        assert after_status["status"] == {"phase": "Ready", "observedGeneration": 1}
        assert after_status["metadata"]["generation"] == 1  # status writes do not bump generation
        managers = {(m["manager"], m.get("subresource")) for m in after_status["metadata"]["managedFields"]}
        assert {("ctl", None), ("ctl-st", "status")} <= managers
        rv = after_status["metadata"]["resourceVersion"]

        await eventually(
            lambda: (cache.get(widget, "w", namespace) or {}).get("metadata", {}).get("resourceVersion") == rv
        )
        await applier.apply(obj(spec={"size": 1}))
        await applier.apply_status(status)
        assert (applier.writes, applier.skipped) == (2, 2)
        live = await client.get(widget, "w", namespace)
        assert live["metadata"]["resourceVersion"] == rv and live["status"]["phase"] == "Ready"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
