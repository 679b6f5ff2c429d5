"""Helpers for runtime integration tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from maasctl.runtime import GroupVersionKind, Manager, ManagerOptions

CONFIG_MAP = GroupVersionKind("", "v1", "ConfigMap")


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0, every: float = 0.05) -> None:
    """Poll ``check`` until it is true, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(every)


def config_map(name: str, namespace: str, data: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": data or {},
    }


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``manager`` in a task; on exit stop it gracefully and wait for it."""
    task = asyncio.create_task(manager.run())
    try:
        yield task
    finally:
        manager.stop()
        done, _ = await asyncio.wait({task}, timeout=40)
        if not done:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def http_get(port: int | None, path: str) -> tuple[int, str]:
    assert port is not None
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as resp:
        return resp.status, await resp.text()


def options(namespace: str, **kw: Any) -> ManagerOptions:
    return ManagerOptions(
        namespaces=(namespace,),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        **kw,
    )


def widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
