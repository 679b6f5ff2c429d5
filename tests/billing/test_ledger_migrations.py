"""The billing tables' Alembic histories on SQLite and a real PostgreSQL: a database that today's `create_all`
built (with money in it) is adopted without losing a row, a fresh one migrated to head is exactly the tables'
metadata, and replicas starting together migrate once."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, func, inspect, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from maasctl.billing.connector import schema as psp
from maasctl.billing.connector.payments import Payments
from maasctl.billing.ledger import Ledger, credit, usage_charge
from maasctl.billing.ledger import schema as ledger_schema
from maasctl.billing.ledger.migrate import History, current_revision_sync
from maasctl.testenv.postgres import PostgresServer

T0 = datetime(2026, 11, 1, tzinfo=UTC)
TENANT = "gw/ten-helix"
HISTORIES = (ledger_schema.HISTORY, psp.HISTORY)


def create_all_as_before_migrations(conn: Connection) -> None:
    """Today's start-up path before the histories existed (main at 0bd6b28): `create_all` and the triggers."""
    ledger_schema.metadata.create_all(conn)
    if conn.dialect.name == "postgresql":
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'the billing ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME; "
            "END $$"))
        for table in ("billing_ledger_transactions", "billing_ledger_postings"):
            conn.execute(text(f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                              "FOR EACH ROW EXECUTE FUNCTION billing_ledger_append_only()"))
    else:
        for table in ("billing_ledger_transactions", "billing_ledger_postings"):
            for op in ("UPDATE", "DELETE"):
                conn.execute(text(
                    f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'the billing ledger is append-only: {op} refused'); END"))
    psp.metadata.create_all(conn)


def _ours(metadata: MetaData) -> Any:
    def include_name(name: str | None, type_: str, parent: Any) -> bool:
        return type_ != "table" or name in metadata.tables  # not the version tables, nor maas-api's
    return include_name


def differences(conn: Connection, metadata: MetaData) -> list[Any]:
    ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": _ours(metadata)})
    return list(compare_metadata(ctx, metadata))


def shape(conn: Connection) -> dict[str, Any]:
    """What a reader of the database sees: tables, columns (type, nullability), keys, indexes, triggers."""
    insp = inspect(conn)
    out: dict[str, Any] = {}
    for table in sorted(t for t in insp.get_table_names() if t.startswith("billing_") and "alembic" not in t):
        out[table] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(table)],
            "pk": insp.get_pk_constraint(table)["constrained_columns"],
            "fks": sorted((tuple(f["constrained_columns"]), f["referred_table"]) for f in insp.get_foreign_keys(table)),
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                              for i in insp.get_indexes(table)),
            "uniques": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table)),
        }
    if conn.dialect.name == "postgresql":
        rows = conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname"))
    else:
        rows = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"))
    out["triggers"] = [r[0] for r in rows]
    return out


async def revisions(engine: AsyncEngine) -> list[str | None]:
    async with engine.connect() as conn:
        return [await conn.run_sync(current_revision_sync, h) for h in HISTORIES]


async def migrate_both(url: str) -> Ledger:
    ledger = Ledger.from_url(url)
    await Payments(ledger).ensure_schema()  # the ledger's history, then the connector's (as the connector starts)
    return ledger


async def test_a_database_built_by_create_all_is_adopted_with_its_money(ledger_url: str, tmp_path: Path,
                                                                         request: pytest.FixtureRequest) -> None:
    old = Ledger.from_url(ledger_url)
    async with old.engine.begin() as conn:
        await conn.run_sync(create_all_as_before_migrations)
    await old.post([credit("c1", TENANT, T0, Decimal("25"), reason="top-up", actor="ops"),
                    usage_charge("usage:r1", TENANT, T0, Decimal("1.250001"), currency="USD", tokens=700,
                                 details={"record": "r1", "priceBook": "pb", "generation": 1})])
    async with old.engine.begin() as conn:
        await conn.execute(psp.reloads.insert().values(
            id="rl-1", tenant=TENANT, connector="stripe", amount_micros=10_000_000, currency="USD",
            state="pending", created_at=T0))
    before = await old.entries(TENANT)
    await old.close()
    assert await revisions(old.engine) == [None, None]

    ledger = await migrate_both(ledger_url)
    try:
        assert await revisions(ledger.engine) == [h.head() for h in HISTORIES]
        assert await ledger.entries(TENANT) == before
        assert await ledger.balance(TENANT) == Decimal("23.749999") and await ledger.verify() == []
        async with ledger.engine.connect() as conn:
            assert (await conn.execute(select(psp.reloads.c.id, psp.reloads.c.state))).all() == [("rl-1", "pending")]
            adopted = await conn.run_sync(shape)
            for h in HISTORIES:
                assert await conn.run_sync(differences, h.metadata) == []
        with pytest.raises((DBAPIError, IntegrityError), match="append-only"):  # the triggers survived
            async with ledger.engine.begin() as conn:
                await conn.execute(update(ledger_schema.postings).values(amount_micros=0))
        await ledger.post([credit("c2", TENANT, T0, Decimal("1"), reason="after", actor="ops")])
        assert await ledger.balance(TENANT) == Decimal("24.749999")
    finally:
        await ledger.close()

    if ledger_url.startswith("sqlite"):
        fresh_url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("billing_pg")
        fresh_url = await server.acreate_database(f"f_{uuid.uuid4().hex[:12]}")
    fresh = await migrate_both(fresh_url)
    try:
        async with fresh.engine.connect() as conn:
            assert adopted == await conn.run_sync(shape)
    finally:
        await fresh.close()


async def test_a_fresh_database_migrated_to_head_is_the_metadata(ledger_url: str) -> None:
    ledger = await migrate_both(ledger_url)
    try:
        assert await revisions(ledger.engine) == ["ledger_0001_baseline", "psp_0001_baseline"]
        async with ledger.engine.connect() as conn:
            for h in HISTORIES:
                assert await conn.run_sync(differences, h.metadata) == []
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        assert tables == {*ledger_schema.metadata.tables, *psp.metadata.tables,
                          "billing_ledger_alembic_version", "billing_psp_alembic_version"}
    finally:
        await ledger.close()


async def test_a_dropped_index_is_a_difference(ledger_url: str) -> None:
    """The comparison the two tests above rely on does see a schema that is not the metadata."""
    ledger = await migrate_both(ledger_url)
    try:
        async with ledger.engine.begin() as conn:
            await conn.execute(text("DROP INDEX ix_billing_psp_events_tenant"))
        async with ledger.engine.connect() as conn:
            diff = await conn.run_sync(differences, psp.metadata)
        assert [(d[0], d[1].name) for d in diff] == [("add_index", "ix_billing_psp_events_tenant")]
    finally:
        await ledger.close()


async def test_replicas_starting_together_migrate_once(ledger_url: str) -> None:
    ledgers = [Ledger.from_url(ledger_url) for _ in range(4)]
    try:
        await asyncio.gather(*(Payments(led).ensure_schema() for led in ledgers))
        async with ledgers[0].engine.connect() as conn:
            for h in HISTORIES:
                rows = await conn.execute(select(func.count()).select_from(text(h.version_table)))
                assert rows.scalar_one() == 1
        assert await revisions(ledgers[0].engine) == [h.head() for h in HISTORIES]
        await ledgers[1].post([credit("c1", TENANT, T0, Decimal("3"), reason="r", actor="a")])
        assert await ledgers[2].balance(TENANT) == Decimal("3")
    finally:
        for led in ledgers:
            await led.close()


_MIGRATE = """
import asyncio, sys
from maasctl.billing.connector.payments import Payments
from maasctl.billing.ledger import Ledger

async def main() -> None:
    ledger = Ledger.from_url(sys.argv[1])
    await Payments(ledger).ensure_schema()
    await ledger.close()

asyncio.run(main())
"""


async def test_processes_starting_together_migrate_once(ledger_url: str) -> None:
    """Separate processes (the operators' replicas) on one fresh database: all start, one history row each."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", _MIGRATE, ledger_url, env=env,
                                                  stderr=asyncio.subprocess.PIPE) for _ in range(4)]
    results = [(await p.communicate())[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, results
    ledger = Ledger.from_url(ledger_url)
    try:
        async with ledger.engine.connect() as conn:
            for h in HISTORIES:
                rows = await conn.execute(select(func.count()).select_from(text(h.version_table)))
                assert rows.scalar_one() == 1
                assert await conn.run_sync(differences, h.metadata) == []
    finally:
        await ledger.close()


def test_the_histories_have_one_head_each() -> None:
    heads: dict[str, History] = {h.version_table: h for h in HISTORIES}
    assert {name: h.head() for name, h in heads.items()} == {
        "billing_ledger_alembic_version": "ledger_0001_baseline", "billing_psp_alembic_version": "psp_0001_baseline"}
