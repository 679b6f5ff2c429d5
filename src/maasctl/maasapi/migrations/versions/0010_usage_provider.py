"""Usage records name the provider that served a model with several providers (issue 38, docs/providers.md).

Revision ID: 0010_usage_provider
Revises: 0009_key_change_notify
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010_usage_provider"
down_revision: str | None = "0009_key_change_notify"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild): keeps the append-only trigger of usage_records on SQLite too. Records
    # stored before read "" (a model with one provider, as all of them were).
    op.add_column("usage_records", sa.Column("provider", sa.String(63), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("provider")
