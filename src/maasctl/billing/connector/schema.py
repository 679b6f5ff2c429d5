"""The psp-connector's bookkeeping tables, in the ledger's database (so a confirmed payment is credited to the
wallet and marked settled in one database transaction). None of them holds a secret: customer ids, keys and
webhook secrets stay in Kubernetes Secrets; these tables keep our own attempt ids and the PSP's object ids.

- `billing_psp_reloads`: one row per reload attempt (our id is the PSP idempotency key). A partial unique index
  allows one `pending` attempt per tenant: two concurrent triggers can never both start one.
- `billing_psp_events`: every inbound event applied, unique by `<connector>:<event id>` (a redelivered or
  replayed event is recognised and ignored), with its effect (payment succeeded/failed, dispute, ...): the
  tenant's consecutive failures and open disputes are derived from it.
- `billing_psp_webhooks`: one row per delivery (accepted, duplicate, signature failure, ...): `received24h` and
  `signatureFailures`.
- `billing_psp_tenant_locks`: a row per tenant written first in every payment transaction, which serialises
  them per tenant on PostgreSQL (row lock) and SQLite (the write lock).
- `billing_psp_usage_pushes` / `billing_psp_invoices`: what was pushed for invoicing, idempotent by key. They
  are defined in `billing.ledger.invoice_book` (on this history's `metadata`), where the billing controller, which
  may not import the connector, reads a tenant's invoices for the portal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, text
from sqlalchemy.engine import Connection

from maasctl.billing.ledger.invoice_book import invoices, metadata, usage_pushes
from maasctl.billing.ledger.migrate import History, upgrade_sync
from maasctl.dbtypes import UTCDateTime

__all__ = ["HISTORY", "create_schema_sync", "events", "invoices", "locks", "metadata", "reloads",
           "usage_pushes", "webhooks"]

_ID = BigInteger().with_variant(Integer(), "sqlite")

reloads = Table(
    "billing_psp_reloads",
    metadata,
    Column("id", String(64), primary_key=True),  # our attempt id, also the PSP idempotency key
    Column("tenant", String(317), nullable=False),
    Column("connector", String(317), nullable=False),
    Column("amount_micros", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("state", String(16), nullable=False),  # pending, succeeded, failed
    Column("intent_id", String(255)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("settled_at", UTCDateTime),
    Column("failure_code", String(64)),
)
Index("ix_billing_psp_reloads_tenant_time", reloads.c.tenant, reloads.c.created_at)
Index("ix_billing_psp_reloads_intent", reloads.c.intent_id)
Index("ux_billing_psp_reloads_one_pending", reloads.c.tenant, unique=True,
      postgresql_where=text("state = 'pending'"), sqlite_where=text("state = 'pending'"))

events = Table(
    "billing_psp_events",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("key", String(400), nullable=False, unique=True),  # <connector>:<event id>
    Column("connector", String(317), nullable=False),
    Column("tenant", String(317)),
    Column("type", String(64), nullable=False),
    Column("effect", String(32), nullable=False),
    Column("reference", String(255)),  # the PSP object (intent, dispute, invoice id)
    Column("code", String(64)),
    Column("received_at", UTCDateTime, nullable=False),
)
Index("ix_billing_psp_events_tenant", events.c.tenant, events.c.id)

webhooks = Table(
    "billing_psp_webhooks",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("connector", String(317), nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    Column("outcome", String(32), nullable=False),
)
Index("ix_billing_psp_webhooks_connector_time", webhooks.c.connector, webhooks.c.received_at)

locks = Table(
    "billing_psp_tenant_locks",
    metadata,
    Column("tenant", String(317), primary_key=True),
    Column("touched_at", UTCDateTime, nullable=False),
)

HISTORY: Final = History(Path(__file__).with_name("migrations"), metadata, "billing_psp_alembic_version",
                         0x70737063)  # "pspc": one replica migrates at a time


def create_schema_sync(conn: Connection) -> None:
    """Migrate the connector's tables to head (Alembic, `migrations/`; a database built by `create_all` is
    adopted as the baseline, its rows kept): safe on every start and from concurrent replicas."""
    upgrade_sync(conn, HISTORY)
