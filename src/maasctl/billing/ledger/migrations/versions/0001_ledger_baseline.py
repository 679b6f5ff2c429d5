"""The ledger's tables as `create_all` built them before migrations: adopted when present, else created.

Revision ID: ledger_0001_baseline
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maasctl.billing.ledger.migrate import create_index_if_missing, create_table_if_missing
from maasctl.dbtypes import UTCDateTime

revision: str = "ledger_0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only
_APPEND_ONLY = ("billing_ledger_transactions", "billing_ledger_postings")


def upgrade() -> None:
    create_table_if_missing(
        "billing_ledger_transactions",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(300), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("occurred_at", UTCDateTime, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
    )
    create_index_if_missing("ix_billing_tx_tenant_id", "billing_ledger_transactions", ["tenant", "id"])
    create_index_if_missing("ix_billing_tx_tenant_kind_time", "billing_ledger_transactions",
                            ["tenant", "kind", "occurred_at"])

    create_table_if_missing(
        "billing_ledger_postings",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("transaction_id", _ID, sa.ForeignKey("billing_ledger_transactions.id"), nullable=False),
        sa.Column("account", sa.String(400), nullable=False),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("occurred_at", UTCDateTime, nullable=False),
        sa.Column("amount_micros", sa.BigInteger, nullable=False),
    )
    create_index_if_missing("ix_billing_postings_account", "billing_ledger_postings", ["account"])
    create_index_if_missing("ix_billing_postings_tenant_kind_time", "billing_ledger_postings",
                            ["tenant", "kind", "occurred_at"])
    create_index_if_missing("ix_billing_postings_tx", "billing_ledger_postings", ["transaction_id"])

    create_table_if_missing(
        "billing_rater_cursor",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )

    create_table_if_missing(
        "billing_unpriced_usage",
        sa.Column("record_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("model", sa.String(317), nullable=False),
        sa.Column("occurred_at", UTCDateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
    )
    create_index_if_missing("ix_billing_unpriced_tenant", "billing_unpriced_usage", ["tenant", "occurred_at"])

    create_table_if_missing(
        "billing_budget_firings",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("budget", sa.String(317), nullable=False),
        sa.Column("fired_at", UTCDateTime, nullable=False),
    )
    create_index_if_missing("ix_billing_firings_budget", "billing_budget_firings", ["budget"])

    create_table_if_missing(
        "billing_budget_notices",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("budget", sa.String(317), nullable=False),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_failure", sa.String(64)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime, nullable=False),
        sa.Column("settled_at", UTCDateTime),
    )
    create_index_if_missing("ix_billing_notices_tenant", "billing_budget_notices", ["tenant", "state"])

    _append_only_triggers()


def _append_only_triggers() -> None:
    """UPDATE and DELETE refused on the entries and postings (idempotent: an adopted database has them)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'the billing ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME; "
            "END $$")
        for table in _APPEND_ONLY:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            op.execute(f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                       "FOR EACH ROW EXECUTE FUNCTION billing_ledger_append_only()")
    else:
        for table in _APPEND_ONLY:
            for verb in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'the billing ledger is append-only: {verb} refused'); END")


def downgrade() -> None:
    raise NotImplementedError("the ledger's baseline is not downgraded: it would drop the money's record")
