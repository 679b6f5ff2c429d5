"""Usage and invoice sync of one BillingConnector (run by its reconciler every `usageRecordsInterval`).

For each Invoiced tenant of the connector with a PSP customer: the rated usage the ledger recorded since the last
push is pushed as one invoice item in whole minor units (the sub-unit remainder is carried to the next push:
nothing is lost, nothing pushed twice; the push key, derived from the last ledger entry it covers, is the PSP
idempotency key). Once per `invoiceInterval` period, when something was pushed since the last invoice, an
invoice is created and finalized (`taxMode: psp` turns on the PSP's automatic tax; `none` adds none).
Prepaid tenants are not pushed: their wallet already paid.
"""

from __future__ import annotations

import hashlib

import structlog
from pydantic import ValidationError

from maasctl.api import parse
from maasctl.billing.api import BillingConnector, TenantAccount
from maasctl.billing.api.connector import TaxMode
from maasctl.billing.api.tenant import BillingMode
from maasctl.billing.connector.payments import UsageBook
from maasctl.billing.connector.providers import Failure, Provider
from maasctl.billing.connector.reconcilers import ConnectorContext, customer_of, parse_interval
from maasctl.billing.rules.psp_amounts import from_minor, split_minor
from maasctl.runtime import thaw

__all__ = ["sync_connector"]

log = structlog.get_logger("maasctl.billing.connector")


def _key(prefix: str, *parts: object) -> str:
    return f"maasctl-{prefix}-" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:40]


async def sync_connector(ctx: ConnectorContext, key: str, provider: Provider, connector: BillingConnector
                         ) -> tuple[int, int]:
    """(records pushed, records that failed to push) for this run."""
    book = UsageBook(ctx.payments)
    now = ctx.clock.now()
    sync = connector.spec.sync
    invoice_every = parse_interval(sync.invoice_interval if sync else "1h", 3600)
    pushed = failed = 0
    for obj in ctx.tenants_of(key):
        try:
            tenant = parse(TenantAccount, thaw(obj))
        except ValidationError:
            continue
        if tenant.spec.billing_mode != BillingMode.INVOICED:
            continue
        customer, _ = await customer_of(ctx, tenant)
        if customer is None:
            continue
        tkey = f"{tenant.metadata.namespace}/{tenant.metadata.name}"
        currency = ctx.currency_of(obj)
        _, upto, records, due = await book.unpushed(tkey)
        if records:
            minor, _ = split_minor(due, currency)
            push_key = _key("usage", key, tkey, upto)
            try:
                external = await provider.push_usage(push_key, tkey, minor, currency, records, customer) \
                    if minor else ""
            except Failure as exc:
                failed += records
                log.warning("usage push failed", connector=key, tenant=tkey, reason=exc.reason)
                continue
            await book.record(push_key, key, tkey, upto, records, from_minor(minor, currency), currency, external, now)
            pushed += records
        period = int(now.timestamp()) // invoice_every
        invoice_key = _key("invoice", key, tkey, period)
        if await book.pushed_since_invoice(tkey) > 0 and not await book.invoiced(invoice_key):
            try:
                invoice = await provider.create_invoice(invoice_key, tkey, customer,
                                                        connector.spec.tax_mode == TaxMode.PSP)
            except Failure as exc:
                log.warning("invoice failed", connector=key, tenant=tkey, reason=exc.reason)
                raise
            await book.record_invoice(invoice_key, key, tkey, invoice, now)
            log.info("invoice created", connector=key, tenant=tkey, invoice=invoice)
    return pushed, failed
