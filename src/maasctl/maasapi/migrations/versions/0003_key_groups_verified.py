"""When an API key's group snapshot was last confirmed by its owner's own token.

Revision ID: 0003_key_groups_verified
Revises: 0002_usage
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maasctl.dbtypes import UTCDateTime

revision: str = "0003_key_groups_verified"
down_revision: str | None = "0002_usage"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("groups_verified_at", UTCDateTime, nullable=True))
    op.create_index("ix_api_keys_owner", "api_keys", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_owner", "api_keys")
    op.drop_column("api_keys", "groups_verified_at")  # in place: rebuilding api_keys cascades to its children
