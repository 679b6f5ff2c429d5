"""Subscriptions and models read from the runtime's informer cache, not listed on every request.

One watch per kind keeps an in-memory copy current; maas-api's requests only read it. Until the first list
has completed, requests wait for it (bounded), so a fresh replica never answers from an empty cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from maasctl.maasapi.models import ModelInfo, model_from_object
from maasctl.maasapi.subscriptions import Subscription, subscription_from_object
from maasctl.runtime import Cache, CacheOptions, Client, GroupVersionKind
from maasctl.runtime.objects import FrozenObject, thaw

MAAS_SUBSCRIPTION = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSSubscription")
MAAS_MODEL_REF = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSModelRef")
SYNC_DEADLINE = 30.0
V = TypeVar("V")


class CachedSources:
    """Implements `SubscriptionSource` and `ModelSource` on one shared informer cache.

    `start()` begins watching (call it in the app's event loop); `stop()` ends the watches.
    """

    def __init__(self, client: Client, subscription_namespace: str | None = None) -> None:
        # Models live in any namespace, so the cache watches all; subscriptions are filtered on read.
        self.cache = Cache(client, CacheOptions())
        self._subscription_namespace = subscription_namespace
        self.cache.informer(MAAS_SUBSCRIPTION)
        self.cache.informer(MAAS_MODEL_REF)
        self._task: asyncio.Task[None] | None = None
        # Parsed views by uid, reused while the object's resourceVersion is unchanged: the select callback
        # lists subscriptions on every request, and parsing is the costly part.
        self._subscriptions: dict[str, tuple[str, Subscription]] = {}
        self._models: dict[str, tuple[str, ModelInfo]] = {}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.cache.run(), name="maas-api cache")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _synced(self, gvk: GroupVersionKind) -> None:
        self.start()
        if not await self.cache.wait_for_sync([gvk], deadline=SYNC_DEADLINE):
            raise TimeoutError(f"{gvk.kind} cache not synced after {SYNC_DEADLINE}s")

    async def list_subscriptions(self) -> Sequence[Subscription]:
        await self._synced(MAAS_SUBSCRIPTION)
        objs = self.cache.list(MAAS_SUBSCRIPTION, self._subscription_namespace)
        self._subscriptions = _reuse(self._subscriptions, objs, subscription_from_object)
        return [view for _, view in self._subscriptions.values()]

    async def list_models(self) -> Sequence[ModelInfo]:
        await self._synced(MAAS_MODEL_REF)
        self._models = _reuse(self._models, self.cache.list(MAAS_MODEL_REF), model_from_object)
        return [view for _, view in self._models.values()]


def _reuse(previous: dict[str, tuple[str, V]], objs: Sequence[FrozenObject],
           parse: Callable[[dict[str, Any]], V]) -> dict[str, tuple[str, V]]:
    """Views of `objs` by uid, parsing only objects that are new or changed since `previous`."""
    out: dict[str, tuple[str, V]] = {}
    for obj in objs:
        meta = obj["metadata"]
        uid, version = str(meta.get("uid", meta["name"])), str(meta.get("resourceVersion", ""))
        hit = previous.get(uid)
        out[uid] = hit if hit is not None and hit[0] == version else (version, parse(thaw(obj)))
    return out
