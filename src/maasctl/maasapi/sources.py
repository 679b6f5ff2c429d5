"""Where maas-api reads MaaSSubscriptions and MaaSModelRefs: the contract's typed views.

`CachedSources` (production) keeps one informer per kind and hands out views parsed once per resourceVersion
(`contract.views.Views`); until the first list has completed, requests wait for it (bounded), so a fresh
replica never answers from an empty cache. `StaticSources` is a fixed list, for embedding and for tests of
the pure HTTP behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from maasctl.contract.views import ModelRefView, SubscriptionView, Views
from maasctl.runtime import Cache, CacheOptions, Client, GroupVersionKind

__all__ = ["CachedSources", "ModelSource", "StaticSources", "SubscriptionSource"]

MAAS_SUBSCRIPTION = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSSubscription")
MAAS_MODEL_REF = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSModelRef")
SYNC_DEADLINE = 30.0


@runtime_checkable
class SubscriptionSource(Protocol):
    async def list_subscriptions(self) -> Sequence[SubscriptionView]: ...


@runtime_checkable
class ModelSource(Protocol):
    async def list_models(self) -> Sequence[ModelRefView]: ...


class StaticSources:
    """Fixed subscriptions and models."""

    def __init__(self, subscriptions: Iterable[SubscriptionView] = (), models: Iterable[ModelRefView] = ()) -> None:
        self.subscriptions = list(subscriptions)
        self.models = list(models)

    async def list_subscriptions(self) -> Sequence[SubscriptionView]:
        return list(self.subscriptions)

    async def list_models(self) -> Sequence[ModelRefView]:
        return list(self.models)


class CachedSources:
    """Both sources on one shared informer cache. `start()` begins watching (in the app's event loop)."""

    def __init__(self, client: Client, subscription_namespace: str | None = None) -> None:
        # Models live in any namespace, so the cache watches all; subscriptions are filtered on read.
        self.cache = Cache(client, CacheOptions())
        self.views = Views()
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

    async def list_subscriptions(self) -> Sequence[SubscriptionView]:
        await self._synced(MAAS_SUBSCRIPTION)
        return [self.views.subscription(o) for o in self.cache.list(MAAS_SUBSCRIPTION, self._subscription_namespace)]

    async def list_models(self) -> Sequence[ModelRefView]:
        await self._synced(MAAS_MODEL_REF)
        return [self.views.model_ref(o) for o in self.cache.list(MAAS_MODEL_REF)]
