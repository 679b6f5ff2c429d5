"""The organization an API key was minted under (delegated administration, docs/organizations.md).

Revision ID: 0007_key_organization
Revises: 0006_key_labels_inline
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007_key_organization"
down_revision: str | None = "0006_key_labels_inline"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("organization_id", sa.String(253), nullable=True))
    op.create_index("ix_api_keys_organization", "api_keys", ["organization_id"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_organization", "api_keys")
    op.drop_column("api_keys", "organization_id")  # in place: rebuilding api_keys cascades to its children
