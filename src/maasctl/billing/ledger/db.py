"""The billing database's plumbing, shared by the stores on it (the ledger, the rating and budget books beside it,
the psp-connector's payment book): the engine, a schema history migrated under its locks, the dialect's INSERT
(for `ON CONFLICT`), and batches small enough for the drivers' bind-parameter limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Column, Connection, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from maasctl.billing.ledger.migrate import alembic_lock
from maasctl.dbfiles import private_sqlite_file

__all__ = ["CHUNK", "chunks", "create_tables", "dialect_insert", "make_engine", "present"]

CHUNK = 500  # rows per INSERT statement (bind-parameter limits)


async def create_tables(engine: AsyncEngine, create: Callable[[Connection], None]) -> None:
    """Run `create` (a schema's migration to head, `ledger.migrate`) in one transaction. Concurrent processes
    wait for each other's lock (PostgreSQL advisory lock, SQLite write lock); should one still trip over a table
    another just created, its second look finds the schema current. In one process, one migration at a time
    (`alembic_lock`)."""
    for attempt in (1, 2):
        try:
            async with alembic_lock(), engine.begin() as conn:
                await conn.run_sync(create)
            return
        except OperationalError as exc:
            if attempt == 2 or "already exists" not in str(exc):
                raise


def make_engine(url: str) -> AsyncEngine:
    """An engine for `url` (postgresql+asyncpg://... or sqlite+aiosqlite:///path, its file created 0600)."""
    if url.startswith("sqlite"):
        private_sqlite_file(url)
        return create_async_engine(url, connect_args={"timeout": 30})
    return create_async_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


def dialect_insert(conn: AsyncConnection, table: Any) -> Any:
    """`INSERT` of the connection's dialect, which has `on_conflict_do_nothing` / `on_conflict_do_update`."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"the billing database does not support {conn.dialect.name}")


def chunks(rows: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(rows), size):
        yield rows[i: i + size]


async def present(engine: AsyncEngine, column: Column[Any], values: Sequence[str],
                  conn: AsyncConnection | None = None) -> set[str]:
    """Which of `values` are in `column` (a unique key: the ledger's entry keys, the unpriced record ids). With
    `conn`, on the caller's connection (the rater asks the ledger and the rating book on one)."""
    if conn is None:
        async with engine.connect() as own:
            return await present(engine, column, values, own)
    out: set[str] = set()
    for part in chunks(list(values)):
        out.update(str(r[0]) for r in await conn.execute(select(column).where(column.in_(list(part)))))
    return out
