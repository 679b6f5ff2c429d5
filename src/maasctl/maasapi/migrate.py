"""Run the packaged Alembic migrations on an async engine (at startup, before serving).

Replicas may start together: on PostgreSQL a transaction-scoped advisory lock serialises them, so exactly
one applies each revision and the others find the schema current.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_ADVISORY_LOCK_ID = 0x6D616173  # "maas"


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(conn: Connection, revision: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _ADVISORY_LOCK_ID})
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def _current(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(_current)
