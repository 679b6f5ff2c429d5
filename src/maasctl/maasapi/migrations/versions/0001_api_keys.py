"""API keys, their labels and the audit trail.

Revision ID: 0001_api_keys
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maasctl.dbtypes import UTCDateTime

revision: str = "0001_api_keys"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("key_hash", sa.String(128), nullable=False),
        sa.Column("hash_algorithm", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("owner", sa.String(253), nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("subscription_namespace", sa.String(63), nullable=False),
        sa.Column("subscription_name", sa.String(253), nullable=False),
        sa.Column("ephemeral", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("revoked_at", UTCDateTime, nullable=True),
        sa.Column("revoked_by", sa.String(253), nullable=True),
        sa.Column("revoke_reason", sa.Text, nullable=True),
    )
    op.create_index("ix_api_keys_owner_created", "api_keys", ["owner", "created_at"])
    op.create_index("ix_api_keys_subscription", "api_keys", ["subscription_namespace", "subscription_name"])
    op.create_table(
        "api_key_labels",
        sa.Column("key_id", sa.String(32), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("value", sa.String(253), nullable=False),
    )
    op.create_index("ix_api_key_labels_name_value", "api_key_labels", ["name", "value"])
    op.create_table(
        "api_key_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("details", sa.JSON, nullable=True),
    )
    op.create_index("ix_api_key_events_key", "api_key_events", ["key_id"])
    op.create_index("ix_api_key_events_at", "api_key_events", ["at"])


def downgrade() -> None:
    op.drop_table("api_key_events")
    op.drop_table("api_key_labels")
    op.drop_table("api_keys")
