"""Usage metering: immutable raw usage records and hourly/daily/monthly rollups.

Revision ID: 0002_usage
Revises: 0001_api_keys
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maasctl.dbtypes import UTCDateTime

revision: str = "0002_usage"
down_revision: str | None = "0001_api_keys"
branch_labels: str | None = None
depends_on: str | None = None

_COUNTERS = ("requests", "failed_requests", "input_tokens", "cached_tokens", "output_tokens",
             "reasoning_tokens", "total_tokens")

_PG_IMMUTABLE = (
    """CREATE FUNCTION usage_records_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'usage records are immutable';
END $$""",
    """CREATE TRIGGER usage_records_no_update BEFORE UPDATE ON usage_records
    FOR EACH ROW EXECUTE FUNCTION usage_records_immutable()""",
)
_SQLITE_IMMUTABLE = """
CREATE TRIGGER usage_records_no_update BEFORE UPDATE ON usage_records
BEGIN SELECT RAISE(ABORT, 'usage records are immutable'); END
"""


def _keys() -> list[sa.Column[str]]:
    return [
        sa.Column("subscription", sa.String(317), primary_key=True),
        sa.Column("username", sa.String(253), primary_key=True),
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(317), primary_key=True),
        sa.Column("organization_id", sa.String(253), primary_key=True),
    ]


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("ts", UTCDateTime, nullable=False),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("username", sa.String(253), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("subscription", sa.String(317), nullable=False),
        sa.Column("organization_id", sa.String(253), nullable=False),
        sa.Column("model", sa.String(317), nullable=False),
        sa.Column("route", sa.String(317), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("streamed", sa.Boolean, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("reasoning_tokens", sa.BigInteger, nullable=False),
        sa.Column("total_tokens", sa.BigInteger, nullable=False),
        sa.Column("charged_tokens", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_usage_records_ts", "usage_records", ["ts"])
    op.create_table(
        "usage_hourly",
        sa.Column("bucket", UTCDateTime, primary_key=True),
        *_keys(),
        *[sa.Column(c, sa.BigInteger, nullable=False) for c in _COUNTERS],
    )
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.Date, primary_key=True),
        *_keys(),
        sa.Column("month", sa.String(7), nullable=False),
        *[sa.Column(c, sa.BigInteger, nullable=False) for c in _COUNTERS],
    )
    op.create_index("ix_usage_daily_subscription_day", "usage_daily", ["subscription", "day"])
    op.create_table(
        "usage_monthly",
        sa.Column("month_start", sa.Date, primary_key=True),
        *_keys(),
        *[sa.Column(c, sa.BigInteger, nullable=False) for c in _COUNTERS],
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for statement in _PG_IMMUTABLE:
            op.execute(statement)
    elif bind.dialect.name == "sqlite":
        op.execute(_SQLITE_IMMUTABLE)


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DROP TRIGGER IF EXISTS usage_records_no_update" + (" ON usage_records" if
               bind.dialect.name == "postgresql" else ""))
    if bind.dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS usage_records_immutable()")
    op.drop_table("usage_monthly")
    op.drop_table("usage_daily")
    op.drop_table("usage_hourly")
    op.drop_table("usage_records")
