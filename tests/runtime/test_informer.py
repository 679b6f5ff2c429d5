"""Informers against the real API server: ordering, re-list after restart and after 410, CRDs appearing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import (
    Cache,
    CacheOptions,
    Client,
    Event,
    GroupVersionKind,
    Informer,
    Invalid,
    Manager,
    Metrics,
    NotFound,
    Request,
    Result,
)
from maasctl.runtime.informer import InformerState
from maasctl.testenv import ControlPlane

from .helpers import CONFIG_MAP, config_map, eventually, http_get, options, running, widget_crd

pytestmark = pytest.mark.integration


async def _running(inf: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(inf.run())
    try:
        assert await inf.wait_for_sync(30)
        yield inf
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _server_state(client: Client, namespace: str) -> dict[str, str]:
    items = (await client.list(CONFIG_MAP, namespace)).items
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}


def _cache_state(inf: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.store}


async def test_informer_sees_every_change_in_order(client: Client, namespace: str) -> None:
    seen: list[tuple[str, str, Any]] = []
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,))
    inf.add_handler(lambda e: seen.append((e.type.value, e.obj["metadata"]["name"], dict(e.obj.get("data") or {}))))
    async for _ in _running(inf):
        await client.create(config_map("a", namespace, {"v": "1"}))
        await client.patch(CONFIG_MAP, "a", namespace, {"data": {"v": "2"}})
        await client.create(config_map("b", namespace))
        await client.delete(CONFIG_MAP, "a", namespace)
        await client.patch(CONFIG_MAP, "b", namespace, {"data": {"w": "1"}})
        await eventually(lambda: len(seen) >= 5)
        assert seen == [
            ("add", "a", {"v": "1"}),
            ("update", "a", {"v": "2"}),
            ("add", "b", {}),
            ("delete", "a", {"v": "2"}),
            ("update", "b", {"w": "1"}),
        ]
        assert _cache_state(inf) == await _server_state(client, namespace)
        with pytest.raises(TypeError):
            inf.store.get(f"{namespace}/b")["data"]["x"] = "y"  # type: ignore[index]


@pytest.mark.restarts_shared_processes
async def test_converges_after_apiserver_restart(
    client: Client, namespace: str, control_plane: ControlPlane, kube: k8s.ApiClient
) -> None:
    events: list[Event] = []
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,))
    inf.add_handler(events.append)
    async for _ in _running(inf):
        for i in range(5):
            await client.create(config_map(f"cm-{i}", namespace))
        await eventually(lambda: len(inf.store) == 5)
        await control_plane.restart_apiserver()
        fresh = Client(kube, metrics=Metrics())
        await fresh.delete(CONFIG_MAP, "cm-0", namespace)
        await fresh.patch(CONFIG_MAP, "cm-1", namespace, {"data": {"after": "restart"}})
        await fresh.create(config_map("cm-new", namespace))

        async def converged(fresh: Client = fresh) -> bool:
            return _cache_state(inf) == await _server_state(fresh, namespace)

        await eventually(converged, timeout=60, every=0.2)
        assert inf.store.get(f"{namespace}/cm-1")["data"] == {"after": "restart"}  # type: ignore[index]
        deleted = [e.obj["metadata"]["name"] for e in events if e.type.value == "delete"]
        assert deleted == ["cm-0"]  # no phantom deletes, no missed delete


class _StaleWatchClient(Client):
    """Resumes the next watch from an old resourceVersion, as after a long disconnect."""

    stale_rv: str | None = None

    def watch(self, *args: Any, **kw: Any) -> Any:
        if self.stale_rv is not None:
            kw["resource_version"], self.stale_rv = self.stale_rv, None
        return super().watch(*args, **kw)


@pytest.mark.restarts_shared_processes
async def test_relists_after_410_and_converges(
    kube: k8s.ApiClient, namespace: str, control_plane: ControlPlane
) -> None:
    client = _StaleWatchClient(kube, metrics=Metrics())
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,), watch_timeout=(2, 2))
    events: list[Event] = []
    inf.add_handler(events.append)
    await client.create(config_map("keep", namespace))
    gone = await client.create(config_map("gone", namespace))
    old_rv = gone["metadata"]["resourceVersion"]
    async for _ in _running(inf):
        # A restarted apiserver's watch cache starts at the current revision, so resuming from an
        # older resourceVersion gets a real 410 from the server.
        await client.create(config_map("churn", namespace))
        for i in range(20):
            await client.patch(CONFIG_MAP, "churn", namespace, {"data": {"i": str(i)}})
        await client.delete(CONFIG_MAP, "gone", namespace)
        client.stale_rv = old_rv
        await control_plane.restart_apiserver()
        await eventually(lambda: inf.relists >= 1, timeout=60)

        async def converged() -> bool:
            return _cache_state(inf) == await _server_state(client, namespace)

        await eventually(converged, timeout=30)
        assert "gone" not in _cache_state(inf)


async def test_informer_waits_for_missing_crd(client: Client) -> None:
    inf = Informer(client, GroupVersionKind("example.invalid", "v1", "Widget"), crd_poll_interval=0.1)
    task = asyncio.create_task(inf.run())
    try:
        assert await inf.wait_for_sync(5)  # does not block startup
        assert inf.state is InformerState.WAITING_FOR_CRD
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_controller_for_missing_crd_starts_when_crd_is_installed(kube: k8s.ApiClient, namespace: str) -> None:
    group = f"w{uuid.uuid4().hex[:8]}.example.test"
    widget = GroupVersionKind(group, "v1", "Widget")
    crd_gvk = GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
    mgr = Manager(kube, options(namespace))
    seen: list[Request] = []

    async def reconcile(req: Request) -> Result:
        seen.append(req)
        return Result.done()

    mgr.controller("widgets").for_(widget).complete(reconcile)
    mgr.cache.informer(widget)._crd_poll = 0.2
    client = Client(kube)
    async with running(mgr):
        await eventually(lambda: mgr.controllers[0].started, timeout=20)
        status, body = await http_get(mgr.health_port, "/readyz?verbose")
        assert status == 200 and f"informer {widget} waiting for its CRD" in body
        await client.create(widget_crd(group))
        try:
            obj = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": namespace}}

            async def created() -> bool:
                client.mapper.refresh(widget.group_version)
                try:
                    await client.create(obj)
                except (NotFound, Invalid):
                    return False
                return True

            await eventually(created, timeout=30, every=0.5)
            await eventually(lambda: Request(namespace, "w1") in seen, timeout=30)
            status, body = await http_get(mgr.health_port, "/readyz?verbose")
            assert status == 200 and "waiting for its CRD" not in body
        finally:
            await client.delete(crd_gvk, f"widgets.{group}")


async def test_deleting_the_crd_empties_the_cache_and_waits_again(
    client: Client, namespace: str, widget: GroupVersionKind
) -> None:
    events: list[Event] = []
    inf = Informer(client, widget, namespaces=(namespace,), crd_poll_interval=0.2)
    inf.add_handler(events.append)
    obj = {"apiVersion": widget.api_version, "kind": "Widget", "metadata": {"name": "w", "namespace": namespace}}
    await client.create(obj)
    async for _ in _running(inf):
        assert len(inf.store) == 1
        await client.delete(
            GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition"), f"widgets.{widget.group}"
        )
        await eventually(lambda: inf.state is InformerState.WAITING_FOR_CRD, timeout=60, every=0.2)
        assert len(inf.store) == 0
        assert [e.type.value for e in events] == ["add", "delete"]


async def test_cache_label_selector_limits_what_is_cached(client: Client, namespace: str) -> None:
    cache = Cache(client, CacheOptions(namespaces=(namespace,), label_selectors={CONFIG_MAP: "mine=yes"}))
    cache.informer(CONFIG_MAP)
    await client.create(config_map("in", namespace, labels={"mine": "yes"}))
    await client.create(config_map("out", namespace))
    task = asyncio.create_task(cache.run())
    try:
        assert await cache.wait_for_sync(deadline=30)
        assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP, namespace)] == ["in"]
        assert cache.list(CONFIG_MAP, labels={"mine": "yes"}) == cache.list(CONFIG_MAP, index=("label", "mine=yes"))
        assert cache.get(CONFIG_MAP, "out", namespace) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_raising_handler_costs_the_other_handlers_nothing_and_keeps_the_watch(
    client: Client, namespace: str
) -> None:
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError(f"bug handling {event.obj['metadata']['name']}")

    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,))
    inf.add_handler(broken)
    inf.add_handler(lambda e: seen.append(e.obj["metadata"]["name"]))
    async for _ in _running(inf):
        for name in ("a", "b", "c"):
            await client.create(config_map(name, namespace))
        await eventually(lambda: seen == ["a", "b", "c"])
        relists = inf.relists
        await client.create(config_map("d", namespace))
        await eventually(lambda: seen[-1:] == ["d"])
        assert inf.handler_errors == 4 and inf.relists == relists  # the watch was never restarted


class _EmptyWatchClient(Client):
    """A watch that the server closes at once, with nothing in it (a misbehaving proxy)."""

    opened = 0

    def watch(self, *args: Any, **kw: Any) -> Any:
        self.opened += 1

        async def nothing() -> AsyncIterator[dict[str, Any]]:
            return
            yield {}

        return nothing()


async def test_a_watch_that_closes_at_once_is_reopened_with_backoff(kube: k8s.ApiClient, namespace: str) -> None:
    client = _EmptyWatchClient(kube, metrics=Metrics())
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,))
    async for _ in _running(inf):
        await asyncio.sleep(2.0)
    # without backoff this spins thousands of times a second; with it, a handful in two seconds
    assert 1 <= client.opened <= 6 and inf.empty_watches >= 1


@pytest.mark.restarts_shared_processes
@pytest.mark.parametrize("outage", [4.0, 9.0])
async def test_resumes_once_the_server_answers_not_when_the_backoff_ends(
    client: Client, namespace: str, control_plane: ControlPlane, kube: k8s.ApiClient, outage: float
) -> None:
    """A backoff of at least 60 s is armed by the first failure of the outage; the informer must still see a
    change made right after the server is back within a fraction of that (it probes /readyz meanwhile)."""
    inf = Informer(client, CONFIG_MAP, namespaces=(namespace,), backoff=(60.0, 120.0), watch_timeout=(300, 300))
    async for _ in _running(inf):
        await client.create(config_map("before", namespace))
        await eventually(lambda: len(inf.store) == 1)
        await control_plane.stop_apiserver()
        try:
            await asyncio.sleep(outage)
        finally:
            await control_plane.start_apiserver()
        fresh = Client(kube, metrics=Metrics())
        await eventually(fresh.ready, timeout=30)
        await fresh.create(config_map("after", namespace))
        await eventually(lambda: f"{namespace}/after" in {f"{namespace}/{o['metadata']['name']}" for o in inf.store},
                         timeout=30, every=0.2)


async def test_a_failure_while_the_server_answers_keeps_the_full_backoff(client: Client, namespace: str) -> None:
    """The shortcut is for outages only: a list that fails on a healthy server backs off as before."""

    class FailingList(Client):
        calls = 0

        async def list_frozen(self, *args: Any, **kw: Any) -> Any:
            FailingList.calls += 1
            raise RuntimeError("bad stream")

    failing = FailingList(client.api, metrics=Metrics())
    inf = Informer(failing, CONFIG_MAP, namespaces=(namespace,), backoff=(1.5, 3.0), ready_probe_interval=0.1)
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.sleep(3.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert FailingList.calls == 2  # at 0 s, after 1.5-1.8 s, the next not before 4.5 s; not every 0.1 s probe
