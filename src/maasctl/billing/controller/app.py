"""Wiring of `maasctl billing run`: its own Manager (leader election, metrics, probes) with the billing
controllers registered on the shared runtime, exactly as `maasctl run` does for MaaS."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.kinds import (
    BILLING_CONSOLE,
    BUDGET_POLICY,
    GATEWAY,
    HTTP_ROUTE,
    KUADRANT_KINDS,
    KUEUE_KINDS,
    NODE,
    PLAN,
    PRICE_BOOK,
    RESERVATION,
    RESOURCE_FLAVOR,
    TENANT_ACCOUNT,
    WORKLOAD,
)
from maasctl.billing.controller.gpu_meter import GpuMeter, GpuMeterMetrics
from maasctl.billing.controller.portal_api import MAAS_SUBSCRIPTION, Authenticator, PortalApi
from maasctl.billing.controller.rater import PassReport, Rater, RaterMetrics
from maasctl.billing.controller.reconcilers.budget import (
    BUDGET_TENANT_INDEX,
    BudgetReconciler,
    budget_tenant_key,
    enforcement_changed,
)
from maasctl.billing.controller.reconcilers.console import (
    CONSOLE_KINDS,
    OWN_KINDS,
    BillingConsoleReconciler,
    console_of,
)
from maasctl.billing.controller.reconcilers.context import BillingContext
from maasctl.billing.controller.reconcilers.costs import ProviderCosts, cost_secret_names
from maasctl.billing.controller.reconcilers.gpu_meter import GPU_METER_KEY, GpuMeterReconciler, flavor_reader
from maasctl.billing.controller.reconcilers.ledger_watch import LEDGER_WATCH_KEY, LedgerWatch
from maasctl.billing.controller.reconcilers.plan import (
    GENERATED_KINDS,
    PlanReconciler,
    allowance_changed,
    plan_of_generated,
    plans_of_tenant,
    wallet_state_changed,
)
from maasctl.billing.controller.reconcilers.pricebook import PriceBookReconciler
from maasctl.billing.controller.reconcilers.rater import RATER_KEY, RaterReconciler, tenant_enqueuer
from maasctl.billing.controller.reconcilers.reservation import ReservationReconciler, reservation_state_changed
from maasctl.billing.controller.reconcilers.tenant import TenantReconciler
from maasctl.billing.controller.settings import BillingSettings
from maasctl.billing.controller.timers import Timers
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules import names
from maasctl.billing.rules.catalog import Catalog, build_catalog
from maasctl.billing.rules.clock import Clock, SystemClock
from maasctl.runtime import (
    Cache,
    Event,
    EventType,
    LeaderElectionOptions,
    Lifetime,
    Manager,
    ManagerOptions,
    Request,
    run_manager,
    thaw,
)
from maasctl.runtime.controller import MapFunc
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import SPEC_OR_META, any_of, deletion, not_observed

log = structlog.get_logger("maasctl.billing")


def manager_options(settings: BillingSettings) -> ManagerOptions:
    return ManagerOptions(
        namespaces=settings.namespaces,
        metrics_bind_address=settings.metrics_bind_address,
        health_probe_bind_address=settings.health_probe_bind_address,
        leader_election=LeaderElectionOptions(
            enabled=settings.leader_elect,
            namespace=settings.leader_election_namespace,
            name=settings.leader_election_id.replace(".", "-"),
        ),
        max_concurrent_reconciles=settings.max_concurrent_reconciles,
        field_manager=names.FIELD_MANAGER,
        status_field_manager=names.STATUS_FIELD_MANAGER,
        # Generated kinds are cached only for the objects we generate, never the cluster's (MaaS's policies
        # included); a name clash with an object that is not ours is found with a live GET.
        cache_label_selectors={kind: f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}"
                               for kind in (*KUADRANT_KINDS, *KUEUE_KINDS, *OWN_KINDS)},
        # The billing console's objects live in the operator's namespace only (a Role there, not a ClusterRole).
        cache_kind_namespaces={**{kind: (settings.console_namespace,) for kind in CONSOLE_KINDS},
                               # the tenant portal's members: subscriptions of the one namespace MaaS honours
                               MAAS_SUBSCRIPTION: (settings.portal_subscription_namespace,)},
    )


def _same_namespace(cache: Cache) -> MapFunc:
    def map_to(obj: FrozenObject) -> list[Request]:
        ns = obj["metadata"].get("namespace")
        return [Request.for_object(o) for o in cache.list(PRICE_BOOK, ns)]

    return map_to


def catalog_from_cache(cache: Cache, costs: ProviderCosts | None = None) -> Callable[[], Catalog]:
    """A function building the rating catalog from the cache's current billing objects and Gateway regions (and
    the pass-through costs last read from the Secrets PriceBooks name)."""

    def build() -> Catalog:
        geo: dict[str, str] = {}
        for gvk, kind in ((GATEWAY, "Gateway"), (HTTP_ROUTE, "HTTPRoute")):
            for obj in cache.list(gvk):
                meta = obj["metadata"]
                label = (meta.get("labels") or {}).get(names.GEO_LABEL)
                if label:
                    geo[f"{meta.get('namespace')}/{kind}/{meta['name']}"] = str(label)
        return build_catalog([thaw(o) for o in cache.list(TENANT_ACCOUNT)], [thaw(o) for o in cache.list(PLAN)],
                             [thaw(o) for o in cache.list(PRICE_BOOK)], geo,
                             costs.snapshot() if costs is not None else None,
                             costs.units() if costs is not None else None)

    return build


def setup_wallets(manager: Manager, ctx: BillingContext, ledger: Ledger, reader: UsageReader | None,
                  costs: ProviderCosts | None = None) -> None:
    """The TenantAccount (wallet) controller, and the rater when maas-api's usage database is known."""
    catalog = catalog_from_cache(manager.cache, costs)
    tenants = (manager.controller("tenantaccount")
               .for_(TENANT_ACCOUNT, predicates=[any_of(SPEC_OR_META, payment_failures_changed)],
                     unfinished=not_observed)
               .complete(TenantReconciler(ctx, ledger, catalog)))
    budgets = setup_budgets(manager, ctx, ledger, reader)
    enqueue = tenant_enqueuer(tenants.queue.add)
    watch = (manager.controller("ledger-watch")
             .for_(TENANT_ACCOUNT, predicates=[_never])
             .max_concurrent_reconciles(1)
             .complete(LedgerWatch(ctx, ledger, enqueue)))
    watch.queue.add(LEDGER_WATCH_KEY)

    def wake(tenants: set[str]) -> None:
        enqueue(tenants)
        for key in tenants:
            for obj in manager.cache.list(BUDGET_POLICY, index=(BUDGET_TENANT_INDEX, key)):
                budgets(Request.for_object(obj))

    setup_gpu_meter(manager, ctx, ledger, catalog, wake)
    if reader is None:
        return

    def charged(report: PassReport) -> None:
        wake(report.tenants)

    rater = Rater(reader, ledger, catalog, on_page=charged, metrics=RaterMetrics(manager.metrics.registry))
    stall = ctx.settings.rater_stall_seconds
    # Only the leader rates: a standby replica is not stalled, it is waiting for the lease.
    manager.add_ready_check("rater", lambda: rater.stalled(stall) if manager.elected else None)
    rating_ctl = (manager.controller("rater")
                  .for_(TENANT_ACCOUNT, predicates=[_never])
                  .watches(TENANT_ACCOUNT, map_to=lambda _: [RATER_KEY], predicates=[SPEC_OR_META])
                  .watches(PRICE_BOOK, map_to=lambda _: [RATER_KEY], predicates=[SPEC_OR_META])
                  .max_concurrent_reconciles(1)
                  .complete(RaterReconciler(ctx, rater, costs)))
    rating_ctl.queue.add(RATER_KEY)


def setup_gpu_meter(manager: Manager, ctx: BillingContext, ledger: Ledger, catalog: Callable[[], Catalog],
                    wake: Callable[[set[str]], None]) -> None:
    """The GPU meter (docs/billing.md, "GPU metering"): Kueue Workloads' GPU time into the ledger. It needs no
    usage database, only the ledger and the Workloads (read only)."""
    meter = GpuMeter(ledger, catalog, lambda: [thaw(o) for o in manager.cache.list(WORKLOAD)], flavor_reader(ctx),
                     ctx.clock.now, interval=timedelta(seconds=ctx.settings.gpu_segment_seconds),
                     metrics=GpuMeterMetrics(manager.metrics.registry), on_charged=wake)
    ctl = (manager.controller("gpu-meter")
           .for_(TENANT_ACCOUNT, predicates=[_never])
           .watches(WORKLOAD, map_to=lambda _: [GPU_METER_KEY])
           .max_concurrent_reconciles(1)
           .complete(GpuMeterReconciler(ctx, meter)))
    ctl.queue.add(GPU_METER_KEY)


def setup_budgets(manager: Manager, ctx: BillingContext, ledger: Ledger, reader: UsageReader | None
                  ) -> Callable[[Request], None]:
    """The BudgetPolicy controller; returns how to enqueue a budget (the rater wakes its tenant's budgets)."""
    cache = manager.cache
    timers = Timers(ctx.clock)

    def budgets_of_tenant(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        return [Request.for_object(b) for b in cache.list(BUDGET_POLICY, index=(BUDGET_TENANT_INDEX, key))]

    ctl = (manager.controller("budgetpolicy")
           .for_(BUDGET_POLICY, predicates=[SPEC_OR_META], unfinished=not_observed)
           .watches(TENANT_ACCOUNT, map_to=budgets_of_tenant, predicates=[SPEC_OR_META])
           .complete(BudgetReconciler(ctx, ledger, reader, timers)))
    timers.bind(ctl.queue)
    return ctl.queue.add


def payment_failures_changed(event: Event) -> bool:
    """The psp-connector changed a tenant's consecutive payment failures (Dunning and Frozen follow at once)."""
    if event.type is not EventType.UPDATED or event.old is None:
        return False
    return bool((event.old.get("status") or {}).get("consecutivePaymentFailures")
                != (event.obj.get("status") or {}).get("consecutivePaymentFailures"))


def _never(_: object) -> bool:
    return False


def setup_billing(manager: Manager, settings: BillingSettings, clock: Clock | None = None,
                  ledger: Ledger | None = None, reader: UsageReader | None = None) -> BillingContext:
    """Register the billing controllers with `manager`; `clock` defaults to real time. With a `ledger`, the
    wallets too (and the rater, with a `reader` of maas-api's usage records)."""
    clock = clock or SystemClock()
    ctx = BillingContext(cache=manager.cache, client=manager.client, applier=manager.applier,
                         events=manager.event_recorder("billing-controller"), clock=clock, settings=settings,
                         ledger=ledger, usage=reader)
    book_timers = Timers(clock)
    siblings = _same_namespace(manager.cache)
    costs = ProviderCosts(manager.client)
    books = (manager.controller("pricebook")
             .for_(PRICE_BOOK, predicates=[SPEC_OR_META], unfinished=not_observed)
             .watches(PRICE_BOOK, map_to=siblings, predicates=[SPEC_OR_META])
             .watches(TENANT_ACCOUNT, map_to=siblings, predicates=[SPEC_OR_META])
             .watches(PLAN, map_to=siblings, predicates=[SPEC_OR_META])
             .complete(PriceBookReconciler(ctx, book_timers, costs)))
    book_timers.bind(books.queue)

    def cost_changed(namespace: str, secret: str) -> None:  # the rater's reading differs: show it on the books
        for obj in manager.cache.list(PRICE_BOOK, namespace):
            if secret in cost_secret_names(obj):
                books.queue.add(Request.for_object(obj))

    costs.on_change = cost_changed

    cache = manager.cache
    cache.add_index(PLAN, TARGET_INDEX, _target_key)
    cache.add_index(BUDGET_POLICY, BUDGET_TENANT_INDEX, budget_tenant_key)
    cache.informer(RESOURCE_FLAVOR)  # so the reconciler sees our ResourceFlavor without asking the server
    builder = (manager.controller("plan")
               .for_(PLAN, predicates=[SPEC_OR_META], unfinished=not_observed)
               .watches(TENANT_ACCOUNT, map_to=plans_of_tenant, predicates=[SPEC_OR_META])
               .watches(GATEWAY, map_to=_plans_targeting(cache, "Gateway"), predicates=[SPEC_OR_META])
               .watches(HTTP_ROUTE, map_to=_plans_targeting(cache, "HTTPRoute"), predicates=[SPEC_OR_META]))
    for kind in GENERATED_KINDS:
        builder = builder.watches(kind, map_to=plan_of_generated, predicates=[SPEC_OR_META])
    builder = builder.watches(TENANT_ACCOUNT, map_to=_plans_of_namespace(cache), predicates=[wallet_state_changed])
    builder = builder.watches(TENANT_ACCOUNT, map_to=plans_of_tenant, predicates=[allowance_changed])
    # A budget's Throttle or Freeze starts or ends: every Plan of the namespace (each carries the 403 texts).
    builder = builder.watches(BUDGET_POLICY, map_to=_plans_of_namespace(cache), predicates=[enforcement_changed])
    builder.complete(PlanReconciler(ctx))
    setup_reservations(manager, ctx)
    setup_console(manager, ctx)
    if ledger is not None:
        setup_wallets(manager, ctx, ledger, reader, costs)
    return ctx


def _node_capacity(obj: FrozenObject) -> tuple[Any, ...]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (tuple(sorted(labels.items())), (obj.get("spec") or {}).get("unschedulable"),
            ((obj.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu"))


def _capacity_changed(event: Event) -> bool:
    return event.type is not EventType.UPDATED or event.old is None or \
        _node_capacity(event.old) != _node_capacity(event.obj)


def setup_reservations(manager: Manager, ctx: BillingContext) -> None:
    """The Reservation controller (one worker: it recomputes every tenant's reservation queue each time)."""
    cache = manager.cache
    timers = Timers(ctx.clock)

    def every_reservation(_: FrozenObject) -> list[Request]:
        return [Request.for_object(o) for o in cache.list(RESERVATION)]

    ctl = (manager.controller("reservation")
           .for_(RESERVATION, predicates=[SPEC_OR_META], unfinished=not_observed)
           .watches(RESERVATION, map_to=every_reservation, predicates=[any_of(reservation_state_changed, deletion)])
           .watches(NODE, map_to=every_reservation, predicates=[_capacity_changed])
           .watches(TENANT_ACCOUNT, map_to=every_reservation, predicates=[SPEC_OR_META])
           .max_concurrent_reconciles(1)
           .complete(ReservationReconciler(ctx, ctx.ledger, catalog_from_cache(cache), timers)))
    timers.bind(ctl.queue)


def setup_console(manager: Manager, ctx: BillingContext) -> None:
    """The BillingConsole controller (docs/billing-console.md): the singleton's Deployment, Service and route."""
    builder = manager.controller("billingconsole").for_(BILLING_CONSOLE, predicates=[SPEC_OR_META],
                                                        unfinished=not_observed)
    for kind in (*OWN_KINDS, HTTP_ROUTE):
        builder = builder.watches(kind, map_to=console_of)
    builder.max_concurrent_reconciles(1).complete(BillingConsoleReconciler(ctx))


TARGET_INDEX = "billing.target"


def _target_key(plan: FrozenObject) -> list[str]:
    ref = (plan.get("spec") or {}).get("targetRef") or {}
    return [f"{plan['metadata'].get('namespace')}/{ref.get('kind')}/{ref.get('name')}"] if ref.get("name") else []


def _plans_targeting(cache: Cache, kind: str) -> MapFunc:
    def map_to(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata'].get('namespace')}/{kind}/{obj['metadata']['name']}"
        return [Request.for_object(p) for p in cache.list(PLAN, index=(TARGET_INDEX, key))]

    return map_to


def _plans_of_namespace(cache: Cache) -> MapFunc:
    """A wallet state change concerns every Plan of the namespace (each carries all denial messages)."""

    def map_to(obj: FrozenObject) -> list[Request]:
        return [Request.for_object(p) for p in cache.list(PLAN, obj["metadata"].get("namespace"))]

    return map_to


def build_billing(api: k8s.ApiClient, settings: BillingSettings, clock: Clock | None = None
                  ) -> tuple[Manager, BillingContext]:
    """The Manager with the billing controllers; the context holds the ledger and usage reader to close."""
    manager = Manager(api, manager_options(settings))
    ledger = Ledger.from_url(settings.ledger_url) if settings.ledger_url else None
    reader = UsageReader.from_url(settings.usage_database_url) if ledger and settings.usage_database_url else None
    return manager, setup_billing(manager, settings, clock, ledger, reader)


def build_billing_manager(api: k8s.ApiClient, settings: BillingSettings, clock: Clock | None = None) -> Manager:
    return build_billing(api, settings, clock)[0]


def serve_portal_api(manager: Manager, ctx: BillingContext, lifetime: Lifetime) -> PortalApi | None:
    """The tenant portal's API beside the manager, on every replica (`--portal-api-bind-address`; none when
    "0"): it reads the cache (MaaSSubscriptions of the subscription namespace as well) and the ledger, and posts
    billing administrators' credits to the ledger (idempotent: any replica may take one)."""
    bind = ctx.settings.portal_api_bind_address
    if not bind or bind == "0":
        return None
    manager.cache.informer(MAAS_SUBSCRIPTION)
    api = PortalApi(manager.cache, Authenticator(manager.raw_client.api), ctx.settings.portal_subscription_namespace,
                    ctx.ledger, ctx.usage, catalog_from_cache(manager.cache), ctx.clock.now)

    async def serve() -> None:
        port = await api.start(bind)
        log.info("tenant portal API listening", port=port)
        try:
            await asyncio.Event().wait()  # until the manager has stopped and this is cancelled
        finally:
            await api.stop()

    lifetime.run_alongside("tenant portal API", serve)
    return api


async def run_billing(settings: BillingSettings, stop: asyncio.Event | None = None) -> int:
    """Run the billing controller until SIGINT/SIGTERM (or `stop`); 1 when the leader lease is lost."""

    def build(api: k8s.ApiClient, lifetime: Lifetime) -> Manager:
        manager, ctx = build_billing(api, settings)
        lifetime.on_exit(ctx.close)  # the ledger's and the usage reader's connections, before the API client
        serve_portal_api(manager, ctx, lifetime)
        log.info("starting billing controller", server=api.configuration.host, wallets=ctx.ledger is not None,
                 rating=ctx.usage is not None)
        return manager

    return await run_manager(build=build, kubeconfig=settings.kubeconfig, stop=stop, name="billing manager")
