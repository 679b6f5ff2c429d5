"""When an API key was last used (`lastUsedAt`, written at most once a minute per key).

Revision ID: 0005_key_last_used
Revises: 0004_usage_attribution
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maasctl.dbtypes import UTCDateTime

revision: str = "0005_key_last_used"
down_revision: str | None = "0004_usage_attribution"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("last_used_at", UTCDateTime, nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "last_used_at")  # in place: rebuilding api_keys cascades to its children
