"""An API key's labels on its own row too (`api_keys.labels`, JSON), so key validation returns them with the
one-row lookup of its hot path: the gateway reads them for BudgetPolicy key selectors. `api_key_labels` stays
the searchable copy; both are written once, at mint (labels never change).

Revision ID: 0006_key_labels_inline
Revises: 0005_key_last_used
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006_key_labels_inline"
down_revision: str | None = "0005_key_last_used"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("labels", sa.JSON, nullable=True))
    bind = op.get_bind()
    labelled: dict[str, dict[str, str]] = {}
    for key_id, name, value in bind.execute(sa.text("SELECT key_id, name, value FROM api_key_labels")):
        labelled.setdefault(str(key_id), {})[str(name)] = str(value)
    keys = sa.table("api_keys", sa.column("id", sa.String), sa.column("labels", sa.JSON))
    for key_id, labels in labelled.items():
        bind.execute(keys.update().where(keys.c.id == key_id).values(labels=labels))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite has it since 3.35): batch mode would copy api_keys to a new table and drop the
    # old one, and on SQLite (foreign keys on) that drop cascades to api_key_labels, losing every key's labels.
    op.execute("ALTER TABLE api_keys DROP COLUMN labels")
