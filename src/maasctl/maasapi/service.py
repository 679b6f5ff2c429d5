"""API key use cases: mint, validate, read, revoke. HTTP-agnostic; raises `ApiError` with stable codes.

Group freshness: a key carries its owner's groups from mint; `refresh_groups` updates them whenever the owner
calls maas-api with a Kubernetes token, and `validate` refuses a key whose groups are older than
`key_groups_max_age` (a membership change reaches keys within that bound).

Revocation freshness: on PostgreSQL `validate` serves the key row from memory (`maasapi.keycache`) while
the database's change notices reach this replica: every write to a key row (revocation through any replica,
bulk revocation, group refresh, purge, an operator's psql) is announced by a trigger and drops the row at
once; without a working notice channel (lost, or no heartbeat answered for 1 s) nothing is served from memory.
Only "valid" is ever answered from memory: every other outcome re-reads the row first, and status, expiry and
group age are computed from the clock on every call. On SQLite (one process) every validation reads the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from maasctl.contract.selection import SelectionCode, select_subscription
from maasctl.contract.views import SubscriptionView
from maasctl.maasapi import keys
from maasctl.maasapi.auth import Identity
from maasctl.maasapi.errors import ApiError
from maasctl.maasapi.keycache import KeyCache
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.store import KeyRecord, KeyScope, KeyStore, MintLimit, MintLimited, SearchQuery

Clock = Callable[[], datetime]
log = structlog.get_logger("maasctl.maasapi")

GROUP_REFRESH_INTERVAL = timedelta(minutes=1)
LAST_USED_DEBOUNCE = timedelta(minutes=1)
"""`lastUsedAt` is written at most once per key and minute (per replica): one UPDATE, not one per request."""

# A well-formed hash of nothing: compared against when the key id does not exist, so unknown ids and wrong
# secrets take the same path and time.
_DUMMY_HASH = "0" * 64


def utcnow() -> datetime:
    return datetime.now(UTC)


def _limited(exc: MintLimited, limit: MintLimit) -> ApiError:
    """The 429 of a refused mint, with the seconds until it can succeed (or a slot frees) as Retry-After."""
    if exc.reason == "too_many_keys":
        code = "too_many_keys"
        message = (f"at most {limit.max_active} active API keys per user: revoke one, or wait until one "
                   "expires")
    else:
        code = "key_mint_rate_limited"
        message = f"at most {limit.per_window} API keys may be minted per user and minute"
    return ApiError(429, code, message, headers={"Retry-After": str(exc.retry_after)})


@dataclass(frozen=True)
class MintInput:
    name: str | None
    description: str
    subscription: str | None
    expires_in: str | int | None
    ephemeral: bool
    labels: dict[str, str]


@dataclass(frozen=True)
class Validation:
    valid: bool
    reason: str | None = None
    record: KeyRecord | None = None


class KeyService:
    def __init__(self, store: KeyStore, settings: MaasApiSettings, clock: Clock = utcnow,
                 cache: KeyCache | None = None) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.cache = cache
        self._pepper = settings.pepper_bytes()
        self._group_refreshes: dict[tuple[str, tuple[str, ...]], datetime] = {}
        self._last_used: dict[str, datetime] = {}
        self.mint_limit = MintLimit(settings.max_active_keys_per_user, settings.key_mints_per_minute,
                                    timedelta(minutes=1))

    def lifetime(self, expires_in: str | int | None, ephemeral: bool) -> timedelta:
        """Requested lifetime, defaulted and bounded by the configured maxima."""
        limit = self.settings.ephemeral_max_expiration if ephemeral else self.settings.max_expiration
        default = (
            self.settings.ephemeral_default_expiration if ephemeral else self.settings.effective_default_expiration
        )
        if expires_in is None:
            return min(default, limit)
        try:
            value = keys.parse_duration(expires_in)
        except keys.BadDuration as exc:
            raise ApiError(400, "invalid_expiration", str(exc)) from None
        if value > limit:
            kind = "ephemeral keys" if ephemeral else "API keys"
            raise ApiError(
                400,
                "invalid_expiration",
                f"expiresIn {expires_in!r} exceeds the maximum of {keys.format_duration(limit)} for {kind}",
            )
        return value

    async def mint(
        self,
        caller: Identity,
        req: MintInput,
        subscriptions: Sequence[SubscriptionView],
    ) -> tuple[KeyRecord, str]:
        """Create a key bound to one subscription; returns the stored record and the one-time plaintext."""
        if not req.ephemeral and not req.name:
            raise ApiError(400, "invalid_request", "name is required unless the key is ephemeral")
        lifetime = self.lifetime(req.expires_in, req.ephemeral)
        outcome = select_subscription(
            subscriptions,
            caller.username,
            caller.groups,
            requested=req.subscription,
            default_namespace=self.settings.subscription_namespace,
        )
        sub = outcome.subscription
        if sub is None:
            status = 403 if outcome.code is SelectionCode.NOT_READY else 400
            code = "invalid_subscription" if outcome.code is SelectionCode.NOT_FOUND else str(outcome.code)
            raise ApiError(status, code, outcome.message)
        new = keys.generate()
        now = self.clock()
        record = KeyRecord(
            id=new.key_id,
            key_hash=keys.hash_secret(self._pepper, new.key_id, new.secret),
            hash_algorithm=keys.HASH_ALGORITHM,
            name=req.name or f"ephemeral-{new.key_id[:8]}",
            description=req.description,
            owner=caller.username,
            groups=tuple(caller.groups),
            subscription_namespace=sub.namespace,
            subscription_name=sub.name,
            ephemeral=req.ephemeral,
            created_at=now,
            expires_at=now + lifetime,
            labels=dict(req.labels),
            organization_id=sub.organization,
        )
        try:
            await self.store.insert(record, actor=caller.username, details={"subscription": sub.key},
                                    limit=self.mint_limit)
        except MintLimited as exc:
            raise _limited(exc, self.mint_limit) from None
        return record, new.plaintext

    async def validate(self, key: str) -> Validation:
        """Check a presented key. Unknown ids, wrong secrets and malformed keys all answer `invalid_key`;
        only a caller holding the real secret learns that a key is revoked or expired."""
        parsed = keys.parse(key)
        if parsed is None:
            return Validation(False, "invalid_key")
        key_id, secret = parsed
        cache = self.cache
        if cache is not None:
            cached = cache.get(key_id)
            if cached is not None:
                result = self._check(key_id, secret, cached)
                if result.valid:
                    return await self._touched(result)
            # A miss, or anything but "valid" from memory: the database decides.
            generation, read_at = cache.generation, cache.monotonic()
            record = await self.store.get(key_id, with_labels=False)
            if record is not None:
                cache.put(record, generation, read_at)  # only rows that exist: random ids cannot fill it
        else:
            record = await self.store.get(key_id, with_labels=False)
        return await self._touched(self._check(key_id, secret, record))

    def _check(self, key_id: str, secret: str, record: KeyRecord | None) -> Validation:
        """The answer for the presented key given its row (None: unknown id), by the clock of this call."""
        matches = keys.verify(self._pepper, key_id, secret, record.key_hash if record else _DUMMY_HASH)
        if record is None or not matches:
            return Validation(False, "invalid_key")
        now = self.clock()
        status = record.status(now)
        if status != "active":
            return Validation(False, status, record)
        if now - record.groups_as_of > self.settings.key_groups_max_age:
            return Validation(False, "groups_stale", record)
        return Validation(True, None, record)

    async def _touched(self, result: Validation) -> Validation:
        if result.valid and result.record is not None:
            await self._touch(result.record, self.clock())
        return result

    async def _touch(self, record: KeyRecord, now: datetime) -> None:
        """Record the use for `lastUsedAt`, debounced (in memory per replica, and in the UPDATE itself)."""
        seen = self._last_used.get(record.id) or record.last_used_at
        if seen is not None and now - seen < LAST_USED_DEBOUNCE:
            return
        if len(self._last_used) > 100_000:
            self._last_used.clear()
        self._last_used[record.id] = now
        try:
            await self.store.touch(record.id, now, LAST_USED_DEBOUNCE)
        except Exception as exc:  # best effort: a use that cannot be recorded never fails the validation
            log.warning("last_used_not_recorded", key_id=record.id, error_type=type(exc).__name__)

    async def refresh_groups(self, caller: Identity) -> None:
        """The owner just proved their current groups with a Kubernetes token: put them on their keys (at most
        once a minute per owner and group set, so the hot path stays read-only)."""
        if caller.via != "token":
            return
        now = self.clock()
        key = (caller.username, caller.groups)
        last = self._group_refreshes.get(key)
        if last is not None and now - last < GROUP_REFRESH_INTERVAL:
            return
        await self.store.refresh_groups(caller.username, caller.groups, now)
        if len(self._group_refreshes) > 10_000:
            self._group_refreshes.clear()
        self._group_refreshes[key] = now

    async def get_visible(self, caller: Identity, key_id: str, scope: KeyScope | None) -> KeyRecord:
        """The key if `scope` covers it (None: a platform admin, everything; a user's scope is their own keys,
        an organization admin's adds their organizations' keys); otherwise 404, exactly like a missing key."""
        record = await self.store.get(key_id) if keys.is_key_id(key_id) else None
        if record is None or (scope is not None and not scope.covers(record)):
            raise ApiError(404, "not_found", "API key not found")
        return record

    async def revoke(self, caller: Identity, key_id: str, scope: KeyScope | None, reason: str | None) -> KeyRecord:
        """Revoke an active (or expired) key. A key that is already revoked is 404, as in the reference: only
        the call that revoked it succeeds, so a client can tell that its own call took effect."""
        record = await self.get_visible(caller, key_id, scope)
        if not await self.store.revoke(record.id, caller.username, reason or "revoked by request", self.clock()):
            raise ApiError(404, "not_found", "API key not found or already revoked")
        fresh = await self.store.get(record.id)
        assert fresh is not None
        return fresh

    async def search(self, query: SearchQuery) -> tuple[list[KeyRecord], bool]:
        return await self.store.search(query, self.clock())
