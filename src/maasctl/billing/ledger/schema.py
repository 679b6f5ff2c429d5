"""The ledger's tables (PostgreSQL, or SQLite for the embedded default), migrated to head at startup (Alembic,
`migrations/`: a change to a table here needs a revision there; the migration tests compare the two).

- `billing_ledger_transactions`: one row per entry, unique by its natural `key`; who, why, when, what it rated.
- `billing_ledger_postings`: the balanced legs of each entry, amounts as integer micro-units (`amount_micros`:
  exact in both engines, SUM never goes through a float; the Python side is `Decimal`).
- Both are append-only: triggers refuse UPDATE and DELETE. Balances are always derived (SUM of postings).
- Beside the money, in the same history, bookkeeping that is not money and has its own store:
  `billing_rater_cursor` (where the rater is in maas-api's usage records) and `billing_unpriced_usage` (records
  no SKU prices, reported until a PriceBook prices them: the row goes when the charge is posted) are the
  rater's (`rating_book.RatingBook`); `billing_budget_firings` (one row per budget threshold fired in a period:
  whoever inserts it notifies) and `billing_budget_notices` (the signed webhooks of those firings the
  psp-connector is to deliver: an outbox) are the budgets' (`budget_book.BudgetBook`).
"""

from __future__ import annotations

from pathlib import Path
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
)
from sqlalchemy.engine import Connection

from maasctl.billing.ledger.migrate import History, upgrade_sync
from maasctl.dbtypes import UTCDateTime

__all__ = ["HISTORY", "create_schema_sync", "cursor", "firings", "metadata", "notices", "postings",
           "transactions", "unpriced"]


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

HISTORY: Final = History(Path(__file__).with_name("migrations"), metadata, "billing_ledger_alembic_version",
                         0x62696C6C)  # "bill": one replica migrates at a time


def create_schema_sync(conn: Connection) -> None:
    """Migrate the ledger's tables to head (an existing database built by `create_all` is adopted as the
    baseline, its rows kept): safe to run on every start and from concurrent replicas."""
    upgrade_sync(conn, HISTORY)
