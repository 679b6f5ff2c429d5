"""KeyStore and migrations on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text
from sqlalchemy.exc import IntegrityError

from maasctl.maasapi import keys, migrate
from maasctl.maasapi.db import api_key_labels, api_keys
from maasctl.maasapi.store import KeyRecord, KeyStore, SearchQuery, make_engine

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def record(owner: str = "alice", *, sub: str = "premium", name: str = "k", created: datetime = NOW,
           ttl: timedelta = timedelta(days=1), ephemeral: bool = False, labels: dict[str, str] | None = None,
           description: str = "") -> KeyRecord:
    new = keys.generate()
    return KeyRecord(
        id=new.key_id, key_hash=keys.hash_secret(b"p", new.key_id, new.secret), hash_algorithm=keys.HASH_ALGORITHM,
        name=name, description=description, owner=owner, groups=("g1", "g2"), subscription_namespace="ns",
        subscription_name=sub, ephemeral=ephemeral, created_at=created, expires_at=created + ttl,
        labels=labels or {},
    )


async def test_migrations_are_at_head_and_idempotent(store: KeyStore) -> None:
    assert await migrate.current_revision(store.engine) == migrate.head_revision() == "0010_usage_provider"
    await migrate.upgrade(store.engine)  # a second replica starting later finds nothing to do
    async with store.engine.connect() as conn:
        tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
    assert {"api_keys", "api_key_labels", "api_key_events", "alembic_version"} <= tables


async def downgrade(store: KeyStore, revision: str) -> None:
    from alembic import command

    async with store.engine.begin() as conn:
        def down(c: object) -> None:
            cfg = migrate.alembic_config()
            cfg.attributes["connection"] = c
            command.downgrade(cfg, revision)
        await conn.run_sync(down)


async def test_downgrade_and_upgrade_again(store: KeyStore) -> None:
    await downgrade(store, "base")
    assert await migrate.current_revision(store.engine) is None
    await migrate.upgrade(store.engine)
    assert await migrate.current_revision(store.engine) == migrate.head_revision()


async def test_0006_copies_the_labels_of_keys_minted_before_onto_their_row(store: KeyStore) -> None:
    labelled, plain = record(labels={"project": "rag", "team": "ml"}), record(name="plain")
    for rec in (labelled, plain):
        await store.insert(rec, actor="alice")
    await downgrade(store, "0005_key_last_used")  # the row's copy is gone; api_key_labels keeps them
    await migrate.upgrade(store.engine)
    assert await store.get(labelled.id, with_labels=False) == labelled  # the validation hot path sees them
    assert await store.get(plain.id, with_labels=False) == plain


async def test_downgrading_below_the_key_columns_keeps_labels_and_history(store: KeyStore) -> None:
    rec = record(labels={"project": "rag"})
    await store.insert(rec, actor="alice")
    await downgrade(store, "0002_usage")  # 0003..0006 each drop a column of api_keys
    async with store.engine.connect() as conn:
        labels = (await conn.execute(text("SELECT name, value FROM api_key_labels"))).all()
        events = (await conn.execute(text("SELECT action FROM api_key_events"))).all()
    assert [tuple(r) for r in labels] == [("project", "rag")] and [tuple(r) for r in events] == [("minted",)]
    await migrate.upgrade(store.engine)
    again = await store.get(rec.id, with_labels=False)
    assert again is not None and again.labels == {"project": "rag"}


async def test_insert_and_get_round_trip(store: KeyStore) -> None:
    rec = record(labels={"team": "ml", "env": "dev"}, description="d")
    await store.insert(rec, actor="alice")
    got = await store.get(rec.id)
    assert got == rec
    assert got.created_at.tzinfo is not None and got.created_at == NOW
    # The validation hot path reads the key's row only: its labels are on the row too (migration 0006).
    assert (await store.get(rec.id, with_labels=False)) == rec
    assert await store.get("nope") is None
    events = await store.events(rec.id)
    assert [(e.action, e.actor) for e in events] == [("minted", "alice")]


async def test_plaintext_secret_never_stored(store: KeyStore) -> None:
    new = keys.generate()
    rec = KeyRecord(**{**record().__dict__, "id": new.key_id,
                       "key_hash": keys.hash_secret(b"p", new.key_id, new.secret)})
    await store.insert(rec, actor="alice")
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(api_keys))).all()
    dump = repr(rows)
    assert new.secret not in dump and new.plaintext not in dump


async def test_duplicate_id_is_rejected_and_nothing_half_stored(store: KeyStore) -> None:
    rec = record(labels={"a": "1"})
    await store.insert(rec, actor="alice")
    clash = KeyRecord(**{**record(labels={"b": "2"}).__dict__, "id": rec.id})
    with pytest.raises(IntegrityError):
        await store.insert(clash, actor="alice")
    got = await store.get(rec.id)
    assert got is not None and got.labels == {"a": "1"}
    assert len(await store.events(rec.id)) == 1


async def test_status_revoke_and_audit(store: KeyStore) -> None:
    rec = record()
    await store.insert(rec, actor="alice")
    assert rec.status(NOW) == "active"
    assert rec.status(NOW + timedelta(days=2)) == "expired"
    assert await store.revoke(rec.id, "admin", "leaked", NOW + timedelta(minutes=1))
    assert not await store.revoke(rec.id, "admin", "again", NOW + timedelta(minutes=2))
    got = await store.get(rec.id)
    assert got is not None and got.status(NOW) == "revoked"
    assert (got.revoked_by, got.revoke_reason, got.revoked_at) == ("admin", "leaked", NOW + timedelta(minutes=1))
    assert [e.action for e in await store.events(rec.id)] == ["minted", "revoked"]


async def test_search_filters_sorting_and_pagination(store: KeyStore) -> None:
    recs = [record(name=f"key-{i:02d}", created=NOW + timedelta(minutes=i)) for i in range(7)]
    for r in recs:
        await store.insert(r, actor="alice")
    await store.insert(record("bob", name="bobs"), actor="bob")
    await store.insert(record(name="eph", ephemeral=True), actor="alice")
    await store.insert(record(name="Labelled_100%", labels={"team": "ml"}, sub="free",
                              created=NOW - timedelta(minutes=1), description="for the batch job"), actor="alice")
    expired = record(name="old", created=NOW - timedelta(days=5))
    await store.insert(expired, actor="alice")
    await store.revoke(recs[0].id, "alice", "x", NOW)
    now = NOW + timedelta(hours=1)

    page, more = await store.search(SearchQuery(owner="alice", limit=3), now)
    assert more and [r.name for r in page] == ["key-06", "key-05", "key-04"]
    page2, more2 = await store.search(SearchQuery(owner="alice", limit=3, offset=3), now)
    assert [r.name for r in page2] == ["key-03", "key-02", "key-01"] and more2
    page3, more3 = await store.search(SearchQuery(owner="alice", limit=3, offset=6), now)
    assert [r.name for r in page3] == ["key-00", "Labelled_100%", "old"] and not more3

    async def names(**kw: object) -> list[str]:
        rows, _ = await store.search(SearchQuery(**kw), now)  # type: ignore[arg-type]
        return sorted(r.name for r in rows)

    assert await names(owner="alice", statuses=("revoked",)) == ["key-00"]
    assert await names(owner="alice", statuses=("expired",)) == ["old"]
    assert len(await names(owner="alice", statuses=("active",))) == 7
    assert await names(owner="alice", include_ephemeral=True, name_contains="EPH") == ["eph"]
    assert await names(owner="alice", name_contains="eph") == []
    assert await names(owner="alice", name_contains="100%") == ["Labelled_100%"]
    assert await names(owner="alice", name_contains="_1") == ["Labelled_100%"]
    assert await names(owner="alice", description_contains="batch") == ["Labelled_100%"]
    assert await names(owner="alice", labels={"team": "ml"}) == ["Labelled_100%"]
    assert await names(owner="alice", labels={"team": "ml", "x": "y"}) == []
    assert await names(subscription=("ns", "free")) == ["Labelled_100%"]
    assert await names(owner=None, name_contains="bob") == ["bobs"]
    assert await names(owner="alice", created_after=NOW + timedelta(minutes=5)) == ["key-05", "key-06"]
    assert await names(owner="alice", created_before=NOW - timedelta(days=1)) == ["old"]
    by_name, _ = await store.search(SearchQuery(owner="alice", sort="name", descending=False, limit=2), now)
    assert [r.name for r in by_name] == ["Labelled_100%", "key-00"]


async def test_revoke_many_dry_run_and_scope(store: KeyStore) -> None:
    a1, a2, b1 = record("alice"), record("alice", sub="free"), record("bob")
    for r in (a1, a2, b1):
        await store.insert(r, actor=r.owner)
    dry = await store.revoke_many(owner="alice", subscription=None, actor="admin", reason="r", now=NOW,
                                  dry_run=True)
    assert sorted(dry) == sorted([a1.id, a2.id])
    assert (await store.get(a1.id)).revoked_at is None  # type: ignore[union-attr]
    done = await store.revoke_many(owner=None, subscription=("ns", "premium"), actor="job", reason="sub deleted",
                                   now=NOW, dry_run=False, action="subscription_revoked")
    assert sorted(done) == sorted([a1.id, b1.id])
    assert (await store.get(a2.id)).revoked_at is None  # type: ignore[union-attr]
    assert [e.action for e in await store.events(b1.id)] == ["minted", "subscription_revoked"]
    again = await store.revoke_many(owner=None, subscription=("ns", "premium"), actor="job", reason="r", now=NOW,
                                    dry_run=False)
    assert again == []
    with pytest.raises(ValueError):
        await store.revoke_many(owner=None, subscription=None, actor="x", reason="r", now=NOW, dry_run=True)


async def test_purge_after_retention(store: KeyStore) -> None:
    old_revoked, fresh_revoked = record(labels={"a": "b"}), record()
    long_expired = record(created=NOW - timedelta(days=60))
    active = record()
    for r in (old_revoked, fresh_revoked, long_expired, active):
        await store.insert(r, actor="alice")
    await store.revoke(old_revoked.id, "alice", "x", NOW - timedelta(days=40))
    await store.revoke(fresh_revoked.id, "alice", "x", NOW)
    purged = await store.purge(NOW - timedelta(days=30))
    assert purged == 2
    assert await store.get(old_revoked.id) is None and await store.get(long_expired.id) is None
    assert await store.events(old_revoked.id) == []
    assert await store.get(fresh_revoked.id) is not None and await store.get(active.id) is not None
    async with store.engine.connect() as conn:
        assert (await conn.execute(select(api_key_labels))).all() == []
        assert (await conn.execute(text("select count(*) from api_key_events"))).scalar_one() == 3


async def test_sqlite_database_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    st = KeyStore(make_engine(f"sqlite+aiosqlite:///{path}"))
    try:
        await migrate.upgrade(st.engine)
        await st.insert(record(), actor="alice")
    finally:
        await st.close()
    files = [p for p in tmp_path.iterdir() if p.name.startswith("keys.db")]
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in files}
    assert files and set(modes.values()) == {"0o600"}, modes


async def test_concurrent_group_refreshes_and_mints_of_one_owner_never_deadlock(store: KeyStore, db_url: str) -> None:
    """Two replicas (own engines) refreshing one owner's groups while minting for the owner: each refresh writes
    every live key of the owner, so unserialized transactions lock the rows in different orders and PostgreSQL
    aborts one as a deadlock (a user's request failing with 500). All of them must succeed."""
    from maasctl.maasapi.store import MintLimit

    other = KeyStore(make_engine(db_url))
    try:
        for i in range(20):
            await store.insert(record(name=f"k{i}"), "alice")
        limit = MintLimit(max_active=1000, per_window=1000, window=timedelta(minutes=1))
        work = []
        for i in range(40):
            replica = (store, other)[i % 2]
            work.append(replica.refresh_groups("alice", [f"g{i}"], NOW + timedelta(seconds=1)))
            if i % 4 == 0:
                work.append(replica.insert(record(name=f"new{i}"), "alice", limit=limit))
        results = await asyncio.gather(*work, return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
    finally:
        await other.close()
