"""Wiring of `maasctl billing connector` (the psp-connector): its own Manager (field managers `psp-connector`,
leader election, metrics, probes) with the BillingConnector and tenant-payments controllers, and the webhook
receiver, which serves on every replica (applying an event is idempotent in the database)."""

from __future__ import annotations

import asyncio

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.billing.api import BillingConnector
from maasctl.billing.api.kinds import PLAN, PRICE_BOOK, TENANT_ACCOUNT
from maasctl.billing.connector.payments import Applied, Payments
from maasctl.billing.connector.providers import Provider
from maasctl.billing.connector.receiver import Receiver, Registry
from maasctl.billing.connector.reconcilers import (
    BILLING_CONNECTOR,
    BillingConnectorReconciler,
    ConnectorContext,
    ConnectorSecretsReconciler,
    TenantPaymentsReconciler,
)
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.billing.connector.sync import sync_connector
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.clock import Clock, SystemClock
from maasctl.runtime import (
    Event,
    EventType,
    LeaderElectionOptions,
    Lifetime,
    Manager,
    ManagerOptions,
    Request,
    run_manager,
)
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import SPEC_OR_META, any_of

__all__ = ["build_connector", "run_connector", "serve_webhooks"]

log = structlog.get_logger("maasctl.billing.connector")
FIELD_MANAGER = "psp-connector"


def balance_changed(event: Event) -> bool:
    """The billing controller mirrored a new balance (an auto-reload may be due)."""
    if event.type is not EventType.UPDATED or event.old is None:
        return False
    return bool((event.old.get("status") or {}).get("balance") != (event.obj.get("status") or {}).get("balance"))


def manager_options(settings: ConnectorSettings) -> ManagerOptions:
    return ManagerOptions(
        namespaces=settings.namespaces,
        metrics_bind_address=settings.metrics_bind_address,
        health_probe_bind_address=settings.health_probe_bind_address,
        leader_election=LeaderElectionOptions(enabled=settings.leader_elect,
                                              namespace=settings.leader_election_namespace,
                                              name=settings.leader_election_id.replace(".", "-")),
        max_concurrent_reconciles=settings.max_concurrent_reconciles,
        field_manager=FIELD_MANAGER,
        status_field_manager=f"{FIELD_MANAGER}-status",
    )


def build_connector(api: k8s.ApiClient, settings: ConnectorSettings, clock: Clock | None = None,
                    ledger: Ledger | None = None) -> tuple[Manager, ConnectorContext]:
    if ledger is None:
        if not settings.ledger_url:
            raise ValueError("the psp-connector needs --ledger-url (the billing ledger it credits)")
        ledger = Ledger.from_url(settings.ledger_url)
    clock = clock or SystemClock()
    manager = Manager(api, manager_options(settings))
    payments = Payments(ledger)
    registry = Registry()
    cache = manager.cache

    def tenant_of_connector(connector: str, tenant: str | None) -> str | None:
        if tenant is None:
            return None
        ns, _, name = tenant.partition("/")
        obj = cache.get(TENANT_ACCOUNT, name, ns)
        ref = ((obj or {}).get("spec") or {}).get("billingConnectorRef") or {}
        return tenant if obj is not None and f"{ns}/{ref.get('name')}" == connector else None

    def on_applied(connector: str, applied: Applied) -> None:
        if applied.tenant:
            ns, _, name = applied.tenant.partition("/")
            tenants.queue.add(Request(ns, name))
        ns, _, name = connector.partition("/")
        connectors.queue.add(Request(ns, name))

    receiver = Receiver(registry, payments, clock, tenant_of_connector, on_applied)
    ctx = ConnectorContext(cache=cache, client=manager.client, applier=manager.applier,
                           events=manager.event_recorder(FIELD_MANAGER), clock=clock, settings=settings,
                           payments=payments, registry=registry, receiver=receiver)

    async def sync(key: str, provider: Provider, connector: BillingConnector) -> tuple[int, int]:
        return await sync_connector(ctx, key, provider, connector)

    cache.informer(PLAN)
    cache.informer(PRICE_BOOK)

    def tenants_of_connector(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        return [Request.for_object(t) for t in ctx.tenants_of(key)]

    def connector_of_tenant(obj: FrozenObject) -> list[Request]:
        ref = ((obj.get("spec") or {}).get("billingConnectorRef") or {}).get("name")
        return [Request(obj["metadata"].get("namespace"), str(ref))] if ref else []

    connectors = (manager.controller("billingconnector")
                  .for_(BILLING_CONNECTOR, predicates=[SPEC_OR_META])
                  .watches(TENANT_ACCOUNT, map_to=connector_of_tenant, predicates=[SPEC_OR_META])
                  .complete(BillingConnectorReconciler(ctx, sync)))
    (manager.controller("connectorsecrets")
     .for_(BILLING_CONNECTOR, predicates=[SPEC_OR_META])
     .complete(ConnectorSecretsReconciler(ctx, connectors.queue.add)))
    tenants = (manager.controller("tenantpayments")
               .for_(TENANT_ACCOUNT, predicates=[any_of(SPEC_OR_META, balance_changed)])
               .watches(BILLING_CONNECTOR, map_to=tenants_of_connector, predicates=[SPEC_OR_META])
               .complete(TenantPaymentsReconciler(ctx)))
    ctx.enqueue_tenant = lambda key: tenants.queue.add(Request(*key.split("/", 1)))
    return manager, ctx


def serve_webhooks(ctx: ConnectorContext, lifetime: Lifetime) -> None:
    """The webhook receiver beside the manager (on every replica), and the connector's resources to close:
    the receiver stops, then the providers' sessions, then the ledger, then the API client."""
    lifetime.on_exit(ctx.payments.ledger.close)
    lifetime.on_exit(ctx.registry.close)

    async def receive() -> None:
        port = await ctx.receiver.start(ctx.settings.webhook_bind_address)
        log.info("webhook receiver listening", port=port, path="/webhooks/<namespace>/<connector>")
        try:
            await asyncio.Event().wait()  # serves until the manager has stopped and this is cancelled
        finally:
            await ctx.receiver.stop()

    lifetime.run_alongside("webhook receiver", receive)


async def run_connector(settings: ConnectorSettings, stop: asyncio.Event | None = None) -> int:
    """Run the psp-connector until SIGINT/SIGTERM (or `stop`); 1 when the leader lease is lost."""

    def build(api: k8s.ApiClient, lifetime: Lifetime) -> Manager:
        manager, ctx = build_connector(api, settings)
        serve_webhooks(ctx, lifetime)
        log.info("starting psp-connector", server=api.configuration.host, stripe=settings.stripe_api_base)
        return manager

    return await run_manager(build=build, kubeconfig=settings.kubeconfig, stop=stop, name="psp-connector manager")
