"""Where maas-api reads MaaSSubscriptions, MaaSModelRefs and MaaSAuthPolicies: the contract's typed views.

`CachedSources` (production) keeps one informer per kind and hands out views parsed once per resourceVersion
(`contract.views.Views`); until the first list has completed, requests wait for it (bounded), so a fresh
replica never answers from an empty cache. The organization-admin ConfigMaps (`contract.organizations`) are
watched in the subscription namespace only, by their label (maas-api needs no cluster-wide ConfigMap access).
`StaticSources` is a fixed list, for embedding and for tests of the pure HTTP behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import structlog

from maasctl.contract.organizations import ORG_ADMINS_LABEL, OrganizationAdmins, merge_config_maps
from maasctl.contract.views import AuthPolicyView, ModelRefView, SubscriptionView, Views
from maasctl.runtime import Cache, CacheOptions, Client, GroupVersionKind
from maasctl.runtime.informer import InformerState

__all__ = ["BillingObjects", "BillingSource", "CachedSources", "GrantSource", "ModelSource", "OrganizationSource",
           "StaticSources", "SubscriptionSource"]

log = structlog.get_logger("maasctl.maasapi")

MAAS_SUBSCRIPTION = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSSubscription")
MAAS_MODEL_REF = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSModelRef")
MAAS_AUTH_POLICY = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSAuthPolicy")
CONFIG_MAP = GroupVersionKind("", "v1", "ConfigMap")
# The billing operator's kinds (read only, for the Plan limits and tenant state a subscription is also under).
TENANT_ACCOUNT = GroupVersionKind("billing.opendatahub.io", "v1alpha1", "TenantAccount")
PLAN = GroupVersionKind("billing.opendatahub.io", "v1alpha1", "Plan")
BillingObjects = tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]  # TenantAccounts, Plans
SYNC_DEADLINE = 30.0


@runtime_checkable
class SubscriptionSource(Protocol):
    async def list_subscriptions(self) -> Sequence[SubscriptionView]: ...


@runtime_checkable
class ModelSource(Protocol):
    async def list_models(self) -> Sequence[ModelRefView]: ...


@runtime_checkable
class GrantSource(Protocol):
    """The MaaSAuthPolicies: which models are opened to whom (the listings show only what a caller is granted)."""

    async def list_auth_policies(self) -> Sequence[AuthPolicyView]: ...


@runtime_checkable
class BillingSource(Protocol):
    """The TenantAccounts and Plans (`contract.billing_terms`), or None when they are not known: billing not
    installed, or not read yet. Never waits."""

    def billing_objects(self) -> BillingObjects | None: ...


@runtime_checkable
class OrganizationSource(Protocol):
    async def organization_admins(self) -> OrganizationAdmins: ...


class StaticSources:
    """Fixed subscriptions, models and organization administrators (no MaaSAuthPolicies: embed a GrantSource
    next to it for listings filtered by grants)."""

    def __init__(self, subscriptions: Iterable[SubscriptionView] = (), models: Iterable[ModelRefView] = (),
                 organizations: OrganizationAdmins | None = None) -> None:
        self.subscriptions = list(subscriptions)
        self.models = list(models)
        self.organizations = organizations or OrganizationAdmins()

    async def organization_admins(self) -> OrganizationAdmins:
        return self.organizations

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
        self.cache.informer(MAAS_AUTH_POLICY)
        self.cache.informer(TENANT_ACCOUNT)  # waits quietly for its CRD where billing is not installed
        self.cache.informer(PLAN)
        # Organization admins: a second cache, restricted to the subscription namespace and the label.
        self.org_cache = Cache(client, CacheOptions(
            namespaces=(subscription_namespace,) if subscription_namespace else (),
            label_selectors={CONFIG_MAP: f"{ORG_ADMINS_LABEL}=true"}))
        self.org_cache.informer(CONFIG_MAP)
        self._org_admins: tuple[tuple[tuple[str, str], ...], OrganizationAdmins] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self.cache.run(), name="maas-api cache"),
                           asyncio.create_task(self.org_cache.run(), name="maas-api organization cache")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _synced(self, gvk: GroupVersionKind, cache: Cache | None = None) -> None:
        self.start()
        if not await (cache or self.cache).wait_for_sync([gvk], deadline=SYNC_DEADLINE):
            raise TimeoutError(f"{gvk.kind} cache not synced after {SYNC_DEADLINE}s")

    async def organization_admins(self) -> OrganizationAdmins:
        """The merged mapping, parsed again only when a labelled ConfigMap changed."""
        await self._synced(CONFIG_MAP, self.org_cache)
        objs = self.org_cache.list(CONFIG_MAP, self._subscription_namespace)
        version = tuple(sorted((str(o["metadata"].get("uid")), str(o["metadata"].get("resourceVersion")))
                               for o in objs))
        cached = self._org_admins
        if cached is not None and cached[0] == version:
            return cached[1]
        admins = merge_config_maps(objs)
        for problem in admins.refused:
            log.warning("organization_admins_refused", config_map=problem.split(":", 1)[0],
                        reason=problem.split(":", 1)[1].strip())
        self._org_admins = (version, admins)
        return admins

    async def list_subscriptions(self) -> Sequence[SubscriptionView]:
        await self._synced(MAAS_SUBSCRIPTION)
        return [self.views.subscription(o) for o in self.cache.list(MAAS_SUBSCRIPTION, self._subscription_namespace)]

    async def list_models(self) -> Sequence[ModelRefView]:
        await self._synced(MAAS_MODEL_REF)
        return [self.views.model_ref(o) for o in self.cache.list(MAAS_MODEL_REF)]

    def billing_objects(self) -> BillingObjects | None:
        if any(self.cache.informer(k).state is not InformerState.SYNCED for k in (TENANT_ACCOUNT, PLAN)):
            return None
        return self.cache.list(TENANT_ACCOUNT), self.cache.list(PLAN)

    async def list_auth_policies(self) -> Sequence[AuthPolicyView]:
        """The MaaSAuthPolicies of the subscription namespace (the only ones the controller honours)."""
        await self._synced(MAAS_AUTH_POLICY)
        return [self.views.auth_policy(o) for o in self.cache.list(MAAS_AUTH_POLICY, self._subscription_namespace)]
