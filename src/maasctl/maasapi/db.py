"""SQLAlchemy schema of maas-api (the Alembic migrations are the source of truth for the DDL; this module
mirrors them for queries). Timestamps are always timezone-aware UTC, also on SQLite."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from maasctl.dbtypes import UTCDateTime

metadata = MetaData()

# On PostgreSQL, triggers of migration 0009 NOTIFY every change to a row (except `last_used_at` alone) to the
# replicas' validation key caches (maasapi.keycache); they are not mirrored here.
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("key_hash", String(128), nullable=False),
    Column("hash_algorithm", String(32), nullable=False),
    Column("name", String(128), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("owner", String(253), nullable=False),
    Column("groups", JSON, nullable=False),
    Column("subscription_namespace", String(63), nullable=False),
    Column("subscription_name", String(253), nullable=False),
    Column("ephemeral", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    Column("revoked_by", String(253), nullable=True),
    Column("revoke_reason", Text, nullable=True),
    Column("groups_verified_at", UTCDateTime, nullable=True),  # None: created_at
    Column("last_used_at", UTCDateTime, nullable=True),  # None: never used (written at most once a minute)
    Column("labels", JSON, nullable=True),  # set at mint (0006): validation returns them; None before 0006
    # The subscription's organization.id when the key was minted (None: it had none then). Delegated
    # administration reads it so a subscription recreated under another organization never hands over keys.
    Column("organization_id", String(253), nullable=True),
)
Index("ix_api_keys_owner_created", api_keys.c.owner, api_keys.c.created_at)
Index("ix_api_keys_organization", api_keys.c.organization_id)
Index("ix_api_keys_subscription", api_keys.c.subscription_namespace, api_keys.c.subscription_name)

api_key_labels = Table(
    "api_key_labels",
    metadata,
    Column("key_id", String(32), ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(63), primary_key=True),
    Column("value", String(253), nullable=False),
)
Index("ix_api_key_labels_name_value", api_key_labels.c.name, api_key_labels.c.value)

api_key_events = Table(
    "api_key_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key_id", String(32), nullable=False),
    Column("action", String(32), nullable=False),
    Column("actor", String(253), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("reason", Text, nullable=True),
    Column("details", JSON, nullable=True),
)
Index("ix_api_key_events_key", api_key_events.c.key_id)
Index("ix_api_key_events_at", api_key_events.c.at)
