"""Daily and monthly usage rollups by subscription, user and organization only (no key, no model).

Reports and exports grouped by user or subscription read these: the full rollups carry one row per key and
model as well, which made a 1-year report at 10 M records miss its 1 s target (BENCHMARKS.md). The new tables
are filled from the existing full rollups, so history stays reportable.

Revision ID: 0008_usage_user_rollups
Revises: 0007_key_organization
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008_usage_user_rollups"
down_revision: str | None = "0007_key_organization"
branch_labels: str | None = None
depends_on: str | None = None

_COUNTERS = ("requests", "failed_requests", "input_tokens", "cached_tokens", "output_tokens",
             "reasoning_tokens", "total_tokens")
_KEYS = "subscription, username, organization_id"


def _keys() -> list[sa.Column[str]]:
    return [
        sa.Column("subscription", sa.String(317), primary_key=True),
        sa.Column("username", sa.String(253), primary_key=True),
        sa.Column("organization_id", sa.String(253), primary_key=True),
    ]


def _counters() -> list[sa.Column[int]]:
    return [sa.Column(c, sa.BigInteger, nullable=False) for c in _COUNTERS]


def _backfill(target: str, source: str, time_cols: str) -> str:
    sums = ", ".join(f"SUM({c})" for c in _COUNTERS)
    return (f"INSERT INTO {target} ({time_cols}, {_KEYS}, {', '.join(_COUNTERS)}) "
            f"SELECT {time_cols}, {_KEYS}, {sums} FROM {source} GROUP BY {time_cols}, {_KEYS}")


def upgrade() -> None:
    op.create_table(
        "usage_user_daily",
        sa.Column("day", sa.Date, primary_key=True),
        *_keys(),
        sa.Column("month", sa.String(7), nullable=False),
        *_counters(),
    )
    op.create_table(
        "usage_user_monthly",
        sa.Column("month_start", sa.Date, primary_key=True),
        *_keys(),
        *_counters(),
    )
    op.execute(_backfill("usage_user_daily", "usage_daily", "day, month"))
    op.execute(_backfill("usage_user_monthly", "usage_monthly", "month_start"))


def downgrade() -> None:
    op.drop_table("usage_user_monthly")
    op.drop_table("usage_user_daily")
