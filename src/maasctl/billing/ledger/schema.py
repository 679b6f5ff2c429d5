"""The ledger's tables (PostgreSQL, or SQLite for the embedded default), created idempotently at startup.

- `billing_ledger_transactions`: one row per entry, unique by its natural `key`; who, why, when, what it rated.
- `billing_ledger_postings`: the balanced legs of each entry, amounts as integer micro-units (`amount_micros`:
  exact in both engines, SUM never goes through a float; the Python side is `Decimal`).
- Both are append-only: triggers refuse UPDATE and DELETE. Balances are always derived (SUM of postings).
- `billing_rater_cursor` (where the rater is in maas-api's usage records) and `billing_unpriced_usage` (records
  no SKU prices, reported until a PriceBook prices them: the row goes when the charge is posted) are bookkeeping
  of the rater, not money; `billing_budget_firings` (one row per
  budget threshold fired in a period: whoever inserts it notifies) is the budgets' bookkeeping, and
  `billing_budget_notices` the signed webhooks of those firings the psp-connector is to deliver (an outbox).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.engine import Connection

from maasctl.dbtypes import UTCDateTime

__all__ = ["create_schema_sync", "cursor", "firings", "metadata", "notices", "postings", "transactions", "unpriced"]


_ID = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only
metadata = MetaData()

transactions = Table(
    "billing_ledger_transactions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("key", String(300), nullable=False, unique=True),  # the natural key: idempotency
    Column("kind", String(32), nullable=False),
    Column("tenant", String(317), nullable=False),  # namespace/name
    Column("currency", String(3), nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),  # the usage record's time, the credit's time
    Column("recorded_at", UTCDateTime, nullable=False),
    Column("actor", String(253), nullable=False),
    Column("reason", Text, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("details", JSON, nullable=False),
    Column("digest", String(64), nullable=False),
)
Index("ix_billing_tx_tenant_id", transactions.c.tenant, transactions.c.id)
Index("ix_billing_tx_tenant_kind_time", transactions.c.tenant, transactions.c.kind, transactions.c.occurred_at)

postings = Table(
    "billing_ledger_postings",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("transaction_id", _ID, ForeignKey("billing_ledger_transactions.id"), nullable=False),
    Column("account", String(400), nullable=False),
    Column("tenant", String(317), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("amount_micros", BigInteger, nullable=False),  # signed integer micro-units (6 places)
)
Index("ix_billing_postings_account", postings.c.account)
Index("ix_billing_postings_tenant_kind_time", postings.c.tenant, postings.c.kind, postings.c.occurred_at)
Index("ix_billing_postings_tx", postings.c.transaction_id)

cursor = Table(
    "billing_rater_cursor",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("received_at", UTCDateTime, nullable=False),
    Column("record_id", String(64), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

unpriced = Table(
    "billing_unpriced_usage",
    metadata,
    Column("record_id", String(64), primary_key=True),
    Column("tenant", String(317), nullable=False),
    Column("model", String(317), nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("reason", Text, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
)
Index("ix_billing_unpriced_tenant", unpriced.c.tenant, unpriced.c.occurred_at)

firings = Table(
    "billing_budget_firings",
    metadata,
    Column("key", String(300), primary_key=True),  # budget:<ns>/<name>:<cap>:<pct>:<period start>
    Column("budget", String(317), nullable=False),
    Column("fired_at", UTCDateTime, nullable=False),
)
Index("ix_billing_firings_budget", firings.c.budget)

notices = Table(
    "billing_budget_notices",
    metadata,
    Column("key", String(300), primary_key=True),  # the firing's key (one notice per firing)
    Column("event_id", String(64), nullable=False),
    Column("budget", String(317), nullable=False),
    Column("tenant", String(317), nullable=False),
    Column("data", Text, nullable=False),  # the event's JSON `data` (budget_notice.threshold_fired)
    Column("state", String(16), nullable=False),  # pending, sent, skipped
    Column("attempts", Integer, nullable=False),
    Column("last_failure", String(64)),  # a fixed reason (and code), never a secret or a URL
    Column("created_at", UTCDateTime, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("settled_at", UTCDateTime),
)
Index("ix_billing_notices_tenant", notices.c.tenant, notices.c.state)

_APPEND_ONLY: Final = ("billing_ledger_transactions", "billing_ledger_postings")
_LOCK_ID: Final = 0x62696C6C  # "bill": one replica creates the schema at a time


def create_schema_sync(conn: Connection) -> None:
    """Create the tables and the append-only triggers if missing (safe to run on every start)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
    metadata.create_all(conn, checkfirst=True)
    if conn.dialect.name == "postgresql":
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'the billing ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME; "
            "END $$"))
        for table in _APPEND_ONLY:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}"))
            conn.execute(text(f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                              "FOR EACH ROW EXECUTE FUNCTION billing_ledger_append_only()"))
    elif conn.dialect.name == "sqlite":
        for table in _APPEND_ONLY:
            for op in ("UPDATE", "DELETE"):
                conn.execute(text(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'the billing ledger is append-only: {op} refused'); END"))
    else:
        raise NotImplementedError(f"the ledger does not support {conn.dialect.name}")
