"""Subscriptions and models read from the runtime's informer cache, not listed on every request.

One watch per kind keeps an in-memory copy current; maas-api's requests only read it. Until the first list
has completed, requests wait for it (bounded), so a fresh replica never answers from an empty cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from maasctl.maasapi.models import ModelInfo, model_from_object
from maasctl.maasapi.subscriptions import Subscription, subscription_from_object
from maasctl.runtime import Cache, CacheOptions, Client, GroupVersionKind
from maasctl.runtime.objects import thaw

MAAS_SUBSCRIPTION = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSSubscription")
MAAS_MODEL_REF = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSModelRef")
SYNC_DEADLINE = 30.0


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
        return [subscription_from_object(thaw(o)) for o in self.cache.list(MAAS_SUBSCRIPTION,
                                                                            self._subscription_namespace)]

    async def list_models(self) -> Sequence[ModelInfo]:
        await self._synced(MAAS_MODEL_REF)
        return [model_from_object(thaw(o)) for o in self.cache.list(MAAS_MODEL_REF)]
