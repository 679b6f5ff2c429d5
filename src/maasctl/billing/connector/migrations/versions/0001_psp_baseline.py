"""The psp-connector's tables as `create_all` built them before migrations: adopted when present, else created.

Revision ID: psp_0001_baseline
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa

from maasctl.billing.ledger.migrate import create_index_if_missing, create_table_if_missing
from maasctl.dbtypes import UTCDateTime

revision: str = "psp_0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    create_table_if_missing(
        "billing_psp_reloads",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("connector", sa.String(317), nullable=False),
        sa.Column("amount_micros", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("intent_id", sa.String(255)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("settled_at", UTCDateTime),
        sa.Column("failure_code", sa.String(64)),
    )
    create_index_if_missing("ix_billing_psp_reloads_tenant_time", "billing_psp_reloads", ["tenant", "created_at"])
    create_index_if_missing("ix_billing_psp_reloads_intent", "billing_psp_reloads", ["intent_id"])
    create_index_if_missing("ux_billing_psp_reloads_one_pending", "billing_psp_reloads", ["tenant"], unique=True,
                            postgresql_where=sa.text("state = 'pending'"), sqlite_where=sa.text("state = 'pending'"))

    create_table_if_missing(
        "billing_psp_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(400), nullable=False, unique=True),
        sa.Column("connector", sa.String(317), nullable=False),
        sa.Column("tenant", sa.String(317)),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("effect", sa.String(32), nullable=False),
        sa.Column("reference", sa.String(255)),
        sa.Column("code", sa.String(64)),
        sa.Column("received_at", UTCDateTime, nullable=False),
    )
    create_index_if_missing("ix_billing_psp_events_tenant", "billing_psp_events", ["tenant", "id"])

    create_table_if_missing(
        "billing_psp_webhooks",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("connector", sa.String(317), nullable=False),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
    )
    create_index_if_missing("ix_billing_psp_webhooks_connector_time", "billing_psp_webhooks",
                            ["connector", "received_at"])

    create_table_if_missing(
        "billing_psp_tenant_locks",
        sa.Column("tenant", sa.String(317), primary_key=True),
        sa.Column("touched_at", UTCDateTime, nullable=False),
    )

    create_table_if_missing(
        "billing_psp_usage_pushes",
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("connector", sa.String(317), nullable=False),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("upto_entry_id", sa.BigInteger, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("amount_micros", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("external_id", sa.String(255)),
        sa.Column("at", UTCDateTime, nullable=False),
    )
    create_index_if_missing("ix_billing_psp_pushes_tenant", "billing_psp_usage_pushes", ["tenant", "upto_entry_id"])

    create_table_if_missing(
        "billing_psp_invoices",
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("connector", sa.String(317), nullable=False),
        sa.Column("tenant", sa.String(317), nullable=False),
        sa.Column("invoice_id", sa.String(255)),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the psp-connector's baseline is not downgraded: it would drop payment records")
