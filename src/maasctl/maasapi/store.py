"""Persistence of API keys (SQLAlchemy 2 Core, async). Every write that belongs together is one transaction,
so a failed request never leaves a key without its labels or audit event."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, overload

from sqlalchemy import and_, delete, event, exists, false, func, insert, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.elements import ColumnElement

from maasctl.maasapi.db import api_key_events, api_key_labels, api_keys

Status = Literal["active", "revoked", "expired"]

_MINT_LOCK_CLASS = 0x4D414153  # "MAAS": the advisory-lock namespace of per-owner mint checks on PostgreSQL


@dataclass(frozen=True)
class MintLimit:
    """At most `max_active` active keys per owner, and at most `per_window` keys minted per `window`."""

    max_active: int
    per_window: int
    window: timedelta


class MintLimited(Exception):
    """A mint refused by `MintLimit`: `reason` is `too_many_keys` or `mint_rate`; `retry_after` in seconds."""

    def __init__(self, reason: Literal["too_many_keys", "mint_rate"], retry_after: int) -> None:
        super().__init__(reason)
        self.reason: Literal["too_many_keys", "mint_rate"] = reason
        self.retry_after = retry_after


def _seconds_until(when: datetime, now: datetime) -> int:
    """Whole seconds from `now` until `when`, rounded up, at least 1 (a Retry-After value)."""
    return max(1, math.ceil((when - now).total_seconds()))


@dataclass(frozen=True)
class KeyRecord:
    id: str
    key_hash: str
    hash_algorithm: str
    name: str
    description: str
    owner: str
    groups: tuple[str, ...]
    subscription_namespace: str
    subscription_name: str
    ephemeral: bool
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    groups_verified_at: datetime | None = None
    last_used_at: datetime | None = None
    organization_id: str | None = None  # the subscription's organization.id at mint time

    @property
    def groups_as_of(self) -> datetime:
        """When the owner's groups were last confirmed (at mint, or by the owner's own token since)."""
        return self.groups_verified_at or self.created_at

    @property
    def subscription(self) -> str:
        return f"{self.subscription_namespace}/{self.subscription_name}"

    def status(self, now: datetime) -> Status:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class AuditEvent:
    key_id: str
    action: str
    actor: str
    at: datetime
    reason: str | None
    details: dict[str, Any] | None


@dataclass(frozen=True)
class KeyScope:
    """The keys a delegated (organization) administrator may see and revoke: their own (`owner`), and the keys
    of their organizations: minted under one of `organizations`, or minted before their subscription had an
    organization and bound to one of `subscriptions` (the organizations' current subscriptions). Deny by
    default: an empty scope covers nothing."""

    owner: str | None = None
    organizations: frozenset[str] = frozenset()
    subscriptions: frozenset[tuple[str, str]] = frozenset()

    def covers(self, record: KeyRecord) -> bool:
        if self.owner is not None and record.owner == self.owner:
            return True
        if record.organization_id is not None:
            return record.organization_id in self.organizations
        return (record.subscription_namespace, record.subscription_name) in self.subscriptions

    def condition(self) -> ColumnElement[bool]:
        c = api_keys.c
        parts: list[ColumnElement[bool]] = []
        if self.owner is not None:
            parts.append(c.owner == self.owner)
        if self.organizations:
            parts.append(c.organization_id.in_(sorted(self.organizations)))
        legacy = [and_(c.subscription_namespace == ns, c.subscription_name == name)
                  for ns, name in sorted(self.subscriptions)]
        if legacy:
            parts.append(and_(c.organization_id.is_(None), or_(*legacy)))
        return or_(*parts) if parts else false()


@dataclass(frozen=True)
class SearchQuery:
    owner: str | None = None
    scope: KeyScope | None = None  # None: unrestricted (the owner's own search, or a platform admin)
    statuses: tuple[Status, ...] = ()
    subscription: tuple[str, str] | None = None
    name_contains: str | None = None
    description_contains: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    include_ephemeral: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    expires_before: datetime | None = None
    sort: Literal["created_at", "expires_at", "last_used_at", "name"] = "created_at"
    descending: bool = True
    limit: int = 50
    offset: int = 0


_KEY_COLUMNS = [c for c in api_keys.c]


def _record(row: Any, labels: dict[str, str] | None = None) -> KeyRecord:
    """A key from its row; `labels` (from `api_key_labels`) when given, else the row's own copy."""
    m = row._mapping
    return KeyRecord(
        id=m["id"],
        key_hash=m["key_hash"],
        hash_algorithm=m["hash_algorithm"],
        name=m["name"],
        description=m["description"],
        owner=m["owner"],
        groups=tuple(m["groups"] or ()),
        subscription_namespace=m["subscription_namespace"],
        subscription_name=m["subscription_name"],
        ephemeral=bool(m["ephemeral"]),
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        revoked_at=m["revoked_at"],
        revoked_by=m["revoked_by"],
        revoke_reason=m["revoke_reason"],
        labels=labels if labels is not None else dict(m["labels"] or {}),
        groups_verified_at=m["groups_verified_at"],
        last_used_at=m["last_used_at"],
        organization_id=m["organization_id"],
    )


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def _private_sqlite_file(url: str) -> None:
    """Create the SQLite database file readable by its owner only (0600) before SQLite opens it; its WAL and
    shared-memory files inherit that mode. Key hashes and usage live there."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    fd = os.open(database, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(database, 0o600)


def make_engine(url: str, pool_size: int = 10) -> AsyncEngine:
    """An engine tuned per backend (SQLite: WAL + FK + busy timeout, file 0600; PostgreSQL: a sized pool)."""
    if url.startswith("sqlite"):
        _private_sqlite_file(url)
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=False)


def _status_condition(status: Status, now: datetime) -> ColumnElement[bool]:
    if status == "revoked":
        return api_keys.c.revoked_at.is_not(None)
    if status == "expired":
        return and_(api_keys.c.revoked_at.is_(None), api_keys.c.expires_at <= now)
    return and_(api_keys.c.revoked_at.is_(None), api_keys.c.expires_at > now)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_FAST_SQL = "SELECT {cols} FROM api_keys WHERE id = $1".format(cols=", ".join(f'"{c.name}"' for c in api_keys.c))


class _PgKeyLookup:
    """Validation hot path on PostgreSQL: one prepared statement on a raw asyncpg pool.

    Through SQLAlchemy's async layer the same lookup costs ~8x the CPU (greenlet hand-offs, statement
    compilation cache, pool events); at 1,000 validations/s on two shared cores that is the difference
    between a few milliseconds and a queue. Every other query stays on SQLAlchemy.
    """

    def __init__(self, engine: AsyncEngine, size: int) -> None:
        self.dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._size = size
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def _get_pool(self) -> Any:
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    import asyncpg

                    # The pool only ever runs the one read-only SELECT below, so the default
                    # reset-on-release (RESET ALL, UNLISTEN *, ... = one more round trip) is skipped.
                    self._pool = await asyncpg.create_pool(
                        self.dsn, min_size=1, max_size=self._size, reset=_keep_session
                    )
        return self._pool

    async def get(self, key_id: str) -> KeyRecord | None:
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            row = await conn.fetchrow(_FAST_SQL, key_id)
        if row is None:
            return None
        groups, labels = row["groups"], row["labels"]
        return KeyRecord(
            id=row["id"],
            key_hash=row["key_hash"],
            hash_algorithm=row["hash_algorithm"],
            name=row["name"],
            description=row["description"],
            owner=row["owner"],
            groups=tuple(json.loads(groups) if isinstance(groups, str) else groups or ()),
            subscription_namespace=row["subscription_namespace"],
            subscription_name=row["subscription_name"],
            ephemeral=bool(row["ephemeral"]),
            created_at=_aware(row["created_at"]),
            expires_at=_aware(row["expires_at"]),
            revoked_at=_aware(row["revoked_at"]),
            revoked_by=row["revoked_by"],
            revoke_reason=row["revoke_reason"],
            groups_verified_at=_aware(row["groups_verified_at"]),
            last_used_at=_aware(row["last_used_at"]),
            labels=dict(json.loads(labels) if isinstance(labels, str) else labels or {}),
            organization_id=row["organization_id"],
        )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


async def _keep_session(_conn: Any) -> None:
    return None


@overload
def _aware(value: datetime) -> datetime: ...
@overload
def _aware(value: None) -> None: ...
def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class KeyStore:
    """API key rows, labels and audit events."""

    def __init__(self, engine: AsyncEngine, fast_pool_size: int = 10) -> None:
        self.engine = engine
        self._fast = _PgKeyLookup(engine, fast_pool_size) if engine.dialect.name == "postgresql" else None
        # Reads run without an explicit transaction: on PostgreSQL that is one round trip (no BEGIN and no
        # ROLLBACK on pool return), which matters on the validation hot path.
        self.read_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        # Called with the ids of keys this process changed (revoked, deleted, new groups), once committed: the
        # validation key cache drops them at once instead of waiting for the database's notice, so a replica
        # always reads its own writes.
        self.on_changed: Callable[[Sequence[str]], None] | None = None
        self._postgres = engine.dialect.name == "postgresql"
        self._mint_lock = asyncio.Lock()  # SQLite (one process): serializes limited mints

    @property
    def pg_dsn(self) -> str | None:
        """The plain PostgreSQL DSN (for asyncpg connections of our own), None on SQLite."""
        return self._fast.dsn if self._fast is not None else None

    def _changed(self, ids: Sequence[str]) -> None:
        if ids and self.on_changed is not None:
            self.on_changed(ids)

    async def close(self) -> None:
        if self._fast is not None:
            await self._fast.close()
        await self.engine.dispose()

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(select(1))

    async def insert(self, record: KeyRecord, actor: str, details: dict[str, Any] | None = None,
                     limit: MintLimit | None = None) -> None:
        """Store a new key with its labels and audit event. With `limit`, the owner's keys are counted in the
        same transaction, serialized per owner (an advisory lock on PostgreSQL, shared by every replica; one
        lock in the process on SQLite), so concurrent mints cannot pass the limit together (`MintLimited`)."""
        values = {c.name: getattr(record, c.name) for c in api_keys.c}
        values["groups"] = list(record.groups)
        if limit is not None and not self._postgres:
            async with self._mint_lock:
                await self._insert(record, values, actor, details, limit)
        else:
            await self._insert(record, values, actor, details, limit)

    async def _insert(self, record: KeyRecord, values: dict[str, Any], actor: str, details: dict[str, Any] | None,
                      limit: MintLimit | None) -> None:
        async with self.engine.begin() as conn:
            if limit is not None:
                await self._check_limit(conn, record.owner, record.created_at, limit)
            await conn.execute(insert(api_keys).values(**values))
            if record.labels:
                await conn.execute(
                    insert(api_key_labels),
                    [{"key_id": record.id, "name": k, "value": v} for k, v in record.labels.items()],
                )
            await self._event(conn, record.id, "minted", actor, record.created_at, None, details)

    async def _lock_owner(self, conn: AsyncConnection, owner: str) -> None:
        """Serialize the transactions that write many of one owner's keys (mints under a limit, group refreshes)
        across replicas (a PostgreSQL advisory lock held until the transaction ends). Without it two replicas
        refreshing one owner's keys, or a refresh beside a mint, lock the same rows in different orders and
        PostgreSQL aborts one as a deadlock (a failed request). SQLite serializes writers itself."""
        if self._postgres:
            await conn.execute(select(func.pg_advisory_xact_lock(_MINT_LOCK_CLASS, func.hashtext(owner))))

    async def _check_limit(self, conn: AsyncConnection, owner: str, now: datetime, limit: MintLimit) -> None:
        await self._lock_owner(conn, owner)  # held until this transaction ends: the next mint counts this one
        mine = api_keys.c.owner == owner
        since = now - limit.window
        recent = (await conn.execute(
            select(api_keys.c.created_at).where(mine, api_keys.c.created_at > since)
            .order_by(api_keys.c.created_at.desc()).offset(limit.per_window - 1).limit(1)
        )).scalar_one_or_none()
        if recent is not None:  # `per_window` keys were minted in the window: wait until the oldest leaves it
            raise MintLimited("mint_rate", _seconds_until(_aware(recent) + limit.window, now))
        active = and_(mine, _status_condition("active", now))
        count = (await conn.execute(select(func.count()).select_from(api_keys).where(active))).scalar_one()
        if count >= limit.max_active:
            first = (await conn.execute(select(func.min(api_keys.c.expires_at)).where(active))).scalar_one()
            raise MintLimited("too_many_keys", _seconds_until(_aware(first), now))

    async def _event(
        self,
        conn: AsyncConnection,
        key_id: str,
        action: str,
        actor: str,
        at: datetime,
        reason: str | None,
        details: dict[str, Any] | None = None,
    ) -> None:
        await conn.execute(
            insert(api_key_events).values(
                key_id=key_id, action=action, actor=actor, at=at, reason=reason, details=details
            )
        )

    async def get(self, key_id: str, with_labels: bool = True) -> KeyRecord | None:
        """One key by id; reads the database every time (revocation must be visible immediately)."""
        if not with_labels and self._fast is not None:
            return await self._fast.get(key_id)
        async with self.read_engine.connect() as conn:
            row = (await conn.execute(select(*_KEY_COLUMNS).where(api_keys.c.id == key_id))).first()
            if row is None:
                return None
            labels = (await self._labels_for(conn, [key_id])).get(key_id, {}) if with_labels else None
            return _record(row, labels)

    async def _labels_for(self, conn: AsyncConnection, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        if not ids:
            return out
        rows = await conn.execute(
            select(api_key_labels.c.key_id, api_key_labels.c.name, api_key_labels.c.value).where(
                api_key_labels.c.key_id.in_(list(ids))
            )
        )
        for key_id, name, value in rows:
            out.setdefault(key_id, {})[name] = value
        return out

    def _conditions(self, q: SearchQuery, now: datetime) -> list[ColumnElement[bool]]:
        conds: list[ColumnElement[bool]] = []
        if q.owner is not None:
            conds.append(api_keys.c.owner == q.owner)
        if q.scope is not None:
            conds.append(q.scope.condition())
        if q.statuses:
            conds.append(or_(*[_status_condition(s, now) for s in q.statuses]))
        if q.subscription is not None:
            conds.append(api_keys.c.subscription_namespace == q.subscription[0])
            conds.append(api_keys.c.subscription_name == q.subscription[1])
        if q.name_contains:
            conds.append(func.lower(api_keys.c.name).like(f"%{_like_escape(q.name_contains.lower())}%", escape="\\"))
        if q.description_contains:
            conds.append(
                func.lower(api_keys.c.description).like(
                    f"%{_like_escape(q.description_contains.lower())}%", escape="\\"
                )
            )
        if not q.include_ephemeral:
            conds.append(api_keys.c.ephemeral.is_(False))
        if q.created_after is not None:
            conds.append(api_keys.c.created_at >= q.created_after)
        if q.created_before is not None:
            conds.append(api_keys.c.created_at < q.created_before)
        if q.expires_before is not None:
            conds.append(api_keys.c.expires_at < q.expires_before)
        for name, value in q.labels.items():
            conds.append(
                exists().where(
                    api_key_labels.c.key_id == api_keys.c.id,
                    api_key_labels.c.name == name,
                    api_key_labels.c.value == value,
                )
            )
        return conds

    async def search(self, q: SearchQuery, now: datetime) -> tuple[list[KeyRecord], bool]:
        """A page of keys matching `q` and whether more follow (stable order: sort column, then id)."""
        sort_col = {
            "created_at": api_keys.c.created_at,
            "expires_at": api_keys.c.expires_at,
            "last_used_at": api_keys.c.last_used_at,
            "name": api_keys.c.name,
        }[q.sort]
        order = ([sort_col.desc().nulls_last(), api_keys.c.id.desc()] if q.descending
                 else [sort_col.asc().nulls_last(), api_keys.c.id.asc()])  # never-used keys last
        stmt = (
            select(*_KEY_COLUMNS).where(*self._conditions(q, now)).order_by(*order).limit(q.limit + 1).offset(q.offset)
        )
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(stmt))
            has_more = len(rows) > q.limit
            rows = rows[: q.limit]
            labels = await self._labels_for(conn, [r.id for r in rows])
        return [_record(r, labels.get(r.id, {})) for r in rows], has_more

    async def refresh_groups(self, owner: str, groups: Sequence[str], now: datetime) -> int:
        """Record the owner's current groups on their live keys (seen on the owner's own token); returns how
        many keys were updated."""
        stmt = (
            update(api_keys)
            .where(api_keys.c.owner == owner, api_keys.c.revoked_at.is_(None), api_keys.c.expires_at > now)
            .values(groups=list(groups), groups_verified_at=now)
            .returning(api_keys.c.id)
        )
        async with self.engine.begin() as conn:
            await self._lock_owner(conn, owner)  # every replica's refreshes and mints of the owner, one at a time
            ids = [r.id for r in await conn.execute(stmt)]
        self._changed(ids)
        return len(ids)

    async def touch(self, key_id: str, now: datetime, debounce: timedelta) -> None:
        """Record a use of the key, unless one was recorded less than `debounce` ago (one cheap UPDATE)."""
        stmt = (
            update(api_keys)
            .where(api_keys.c.id == key_id,
                   or_(api_keys.c.last_used_at.is_(None), api_keys.c.last_used_at < now - debounce))
            .values(last_used_at=now)
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def revoke(self, key_id: str, actor: str, reason: str, now: datetime) -> bool:
        """Soft-delete one key; False if it was already revoked (the row and audit trail stay)."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now, revoked_by=actor, revoke_reason=reason)
            )
            if result.rowcount == 0:
                return False
            await self._event(conn, key_id, "revoked", actor, now, reason)
        self._changed([key_id])
        return True

    async def revoke_many(
        self,
        *,
        owner: str | None,
        subscription: tuple[str, str] | None,
        actor: str,
        reason: str,
        now: datetime,
        dry_run: bool,
        action: str = "bulk_revoked",
        scope: KeyScope | None = None,
    ) -> list[str]:
        """Revoke every not-yet-revoked key of an owner and/or subscription (within `scope` when given: a
        delegated administrator's organizations); returns the affected ids."""
        if owner is None and subscription is None:
            raise ValueError("revoke_many needs an owner or a subscription")
        conds: list[ColumnElement[bool]] = [api_keys.c.revoked_at.is_(None)]
        if scope is not None:
            conds.append(scope.condition())
        if owner is not None:
            conds.append(api_keys.c.owner == owner)
        if subscription is not None:
            conds += [
                api_keys.c.subscription_namespace == subscription[0],
                api_keys.c.subscription_name == subscription[1],
            ]
        async with self.engine.begin() as conn:
            if dry_run:
                return [r.id for r in await conn.execute(select(api_keys.c.id).where(*conds))]
            result = await conn.execute(
                update(api_keys)
                .where(*conds)
                .values(revoked_at=now, revoked_by=actor, revoke_reason=reason)
                .returning(api_keys.c.id)
            )
            ids = [r.id for r in result]
            if ids:
                await conn.execute(
                    insert(api_key_events),
                    [
                        {
                            "key_id": i,
                            "action": action,
                            "actor": actor,
                            "at": now,
                            "reason": reason,
                            "details": None,
                        }
                        for i in ids
                    ],
                )
        self._changed(ids)
        return ids

    async def events(self, key_id: str) -> list[AuditEvent]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(api_key_events).where(api_key_events.c.key_id == key_id).order_by(api_key_events.c.id)
            )
            return [AuditEvent(r.key_id, r.action, r.actor, r.at, r.reason, r.details) for r in rows]

    async def purge(self, before: datetime) -> int:
        """Hard-delete keys revoked or expired before `before` (the retention cut-off) and their events."""
        cond = or_(
            api_keys.c.revoked_at < before,
            and_(api_keys.c.revoked_at.is_(None), api_keys.c.expires_at < before),
        )
        async with self.engine.begin() as conn:
            ids = [r.id for r in await conn.execute(select(api_keys.c.id).where(cond))]
            if not ids:
                return 0
            await conn.execute(delete(api_key_labels).where(api_key_labels.c.key_id.in_(ids)))
            await conn.execute(delete(api_key_events).where(api_key_events.c.key_id.in_(ids)))
            await conn.execute(delete(api_keys).where(api_keys.c.id.in_(ids)))
        self._changed(ids)
        return len(ids)
