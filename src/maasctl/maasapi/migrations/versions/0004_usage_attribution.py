"""Usage records carry cost center, the subscription's labels, and whether (and why) they were estimated.

Revision ID: 0004_usage_attribution
Revises: 0003_key_groups_verified
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_usage_attribution"
down_revision: str | None = "0003_key_groups_verified"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild): keeps the append-only trigger of usage_records on SQLite too.
    op.add_column("usage_records", sa.Column("cost_center", sa.String(253), nullable=False, server_default=""))
    op.add_column("usage_records", sa.Column("labels", sa.JSON, nullable=False, server_default="{}"))
    op.add_column("usage_records", sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("usage_records", sa.Column("estimate_reason", sa.String(256), nullable=False, server_default=""))
    op.add_column("usage_records", sa.Column("termination", sa.String(32), nullable=False,
                                             server_default="complete"))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        for column in ("termination", "estimate_reason", "estimated", "labels", "cost_center"):
            batch.drop_column(column)
