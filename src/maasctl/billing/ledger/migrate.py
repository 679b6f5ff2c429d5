"""Run a billing schema's packaged Alembic history to head on a connection (at startup, in place of create_all).

Two histories share the billing database, each with its own version table (the database may also be maas-api's,
whose `alembic_version` is left alone): the ledger's (`billing.ledger.migrations`) and the psp-connector's
(`billing.connector.migrations`). Replicas may start together: PostgreSQL serialises them with a
transaction-scoped advisory lock, SQLite with `BEGIN IMMEDIATE` (the write lock, taken before alembic reads the
version table), so exactly one applies each revision and the others find the schema current.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, inspect, text

__all__ = [
    "History",
    "alembic_lock",
    "create_index_if_missing",
    "create_table_if_missing",
    "current_revision_sync",
    "run_env",
    "upgrade_sync",
]


@dataclass(frozen=True)
class History:
    """One migration history: where its scripts are, what it builds, where it records its revision."""

    directory: Path
    metadata: MetaData
    version_table: str
    lock_id: int

    def config(self) -> Config:
        cfg = Config()
        cfg.set_main_option("script_location", str(self.directory))
        cfg.attributes["metadata"] = self.metadata
        cfg.attributes["version_table"] = self.version_table
        return cfg

    def head(self) -> str | None:
        return ScriptDirectory.from_config(self.config()).get_current_head()


_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def run_env() -> None:
    """The body of both histories' `env.py` (ledger, psp-connector): run on the connection `upgrade_sync`
    handed over, with that history's metadata and version table."""
    from alembic import context

    attrs = context.config.attributes
    connection = attrs.get("connection")
    if connection is None:
        raise RuntimeError("the billing migrations run programmatically: use maasctl.billing.ledger.migrate")
    context.configure(connection=connection, target_metadata=attrs["metadata"],
                      version_table=attrs["version_table"],
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def alembic_lock() -> asyncio.Lock:
    """Alembic keeps the running migration in module globals (`alembic.op`, `alembic.context`): two migrations
    interleaved in one process (controllers on one event loop, each awaiting its database) would corrupt them.
    Hold this around `upgrade_sync` (one lock per event loop)."""
    loop = asyncio.get_running_loop()
    lock = _LOCKS.get(loop)
    if lock is None:
        lock = _LOCKS[loop] = asyncio.Lock()
    return lock


def _lock(conn: Connection, lock_id: int) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})
    elif conn.dialect.name == "sqlite":
        # pysqlite opens its transaction lazily (at the first DML): take the write lock now, so that the DDL and
        # the version row are one transaction and a second process waits (busy timeout) instead of racing
        if not conn.connection.driver_connection.in_transaction:  # type: ignore[union-attr]
            conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        raise NotImplementedError(f"the billing database does not support {conn.dialect.name}")


def upgrade_sync(conn: Connection, history: History, revision: str = "head") -> None:
    """Migrate to `revision` inside the caller's transaction (committed with it); under `alembic_lock()`."""
    _lock(conn, history.lock_id)
    cfg = history.config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def current_revision_sync(conn: Connection, history: History) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": history.version_table}).get_current_revision()


def create_table_if_missing(name: str, *columns: Any) -> bool:
    """For a baseline revision: create `name` unless a database built by `create_all` (before the billing tables
    had migrations) already has it; its rows are kept. True if created."""
    if inspect(op.get_bind()).has_table(name):
        return False
    op.create_table(name, *columns)
    return True


def create_index_if_missing(name: str, table: str, columns: list[str], **kw: Any) -> None:
    """For a baseline revision: the index unless the adopted table already has it."""
    if name not in {ix["name"] for ix in inspect(op.get_bind()).get_indexes(table)}:
        op.create_index(name, table, columns, **kw)
