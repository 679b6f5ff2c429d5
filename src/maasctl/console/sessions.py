"""Server-side sessions: the browser holds only a random, HMAC-signed session id in an HttpOnly, SameSite
cookie; the user's credential, CSRF token, a sign-in in flight and one-time secrets stay on the server, in a
`SessionBackend`: this process's memory (one replica, `maasctl dev`) or Redis (`sessionstore.RedisBackend`),
which every replica shares, so a user signed in on one replica continues on another, a sign-out on any ends
the session everywhere, and a restart signs nobody out.

What the backend holds is useless without the browser's cookie: a session is stored under a keyed hash of
its id (never the id), and its fields are sealed (AES-GCM) with a key derived from the id and the session
secret, so a copy of the store (or a process sharing the Redis) reveals no credential and no session id.

Life cycle, the same for both backends (the middleware does every write, once per request):
- `load` reads the cookie's session (a request's own copy); `new` / `signed_in` start one in this request
  only (stored when the response starts, so a new id is issued at every sign-in and sign-out: no session
  fixation); the request's session, when it changed, is written back field by field (`persist`), and only
  while it still exists (a sign-out elsewhere is never undone); the incoming one is deleted when the request
  ends with another or none (`drop`).
- Expiry is enforced on the server at every read (`expires`: 8 hours from sign-in; without a refresh token
  also the ID token's expiry); Redis also forgets an expired session by itself (its key's TTL).
- Bounds: anonymous sessions (every cookie-less page view makes one, for the sign-in form's CSRF token) live
  `anonymous_ttl_seconds` and, at `max_anonymous`, evict only the least recently used anonymous one;
  signed-in sessions are bounded in total (`max_signed_in`) and per user (`max_per_user`: a user's next
  sign-in evicts that user's least recently used session, nobody else's).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

COOKIE_NAME = "maas_console_session"
SEALED = ("csrf", "identity", "pending", "flashes", "once")  # encrypted with the session's own key
REFRESH_MARGIN_SECONDS = 60.0


class StoreUnavailable(Exception):
    """The session backend cannot be reached (the console answers 503; the message names no secret)."""


@dataclass(frozen=True)
class Identity:
    """Who is signed in. `credential` is the bearer token used on their behalf and `refresh_token` renews it
    (OIDC); neither is ever rendered or logged."""

    username: str
    groups: tuple[str, ...]
    credential: str = field(repr=False)
    via: Literal["token", "oidc"] = "token"
    expires_at: float | None = None  # the credential's own expiry (OIDC ID token), if known
    issued_at: float | None = None
    refresh_token: str | None = field(default=None, repr=False)

    def due_for_refresh(self, now: float) -> bool:
        """A refresh token and an ID token in its last quarter (at most the last minute) of life."""
        if self.refresh_token is None or self.expires_at is None:
            return False
        lifetime = self.expires_at - self.issued_at if self.issued_at is not None else 4 * REFRESH_MARGIN_SECONDS
        return now >= self.expires_at - min(REFRESH_MARGIN_SECONDS, max(lifetime, 0.0) / 4)

    def expired(self, now: float) -> bool:
        """The credential has expired and cannot be renewed."""
        return self.refresh_token is None and self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True)
class PendingLogin:
    """An OIDC authorization request in flight (state, nonce, PKCE verifier)."""

    state: str
    nonce: str
    verifier: str = field(repr=False)
    created: float


@dataclass
class Session:
    """One request's copy of a session; the middleware writes back what the request changed."""

    sid: str = field(repr=False)
    csrf: str = field(repr=False)
    expires: float
    identity: Identity | None = None
    pending: PendingLogin | None = None
    flashes: list[tuple[str, str]] = field(default_factory=list)
    _once: dict[str, str] = field(default_factory=dict, repr=False)
    _stored: dict[str, str] | None = field(default=None, repr=False)  # the fields as stored; None: not yet

    def flash(self, kind: str, message: str) -> None:
        """A message shown on the next page (after a POST-redirect-GET)."""
        self.flashes.append((kind, message))

    def take_flashes(self) -> list[tuple[str, str]]:
        out, self.flashes = self.flashes, []
        return out

    def put_once(self, name: str, value: str) -> None:
        """A secret to show exactly once (a minted API key)."""
        self._once[name] = value

    def take_once(self, name: str) -> str | None:
        return self._once.pop(name, None)

    def fields(self) -> dict[str, str]:
        return {
            "csrf": self.csrf,
            "identity": json.dumps(asdict(self.identity)) if self.identity is not None else "",
            "pending": json.dumps(asdict(self.pending)) if self.pending is not None else "",
            "flashes": json.dumps(self.flashes),
            "once": json.dumps(self._once),
        }


def _identity(text: str) -> Identity | None:
    if not text:
        return None
    data = json.loads(text)
    data["groups"] = tuple(data["groups"])
    return Identity(**data)


def _pending(text: str) -> PendingLogin | None:
    return PendingLogin(**json.loads(text)) if text else None


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """How many sessions a backend keeps and for how long (see the module docstring)."""

    signed_in_ttl: float = 8 * 3600
    anonymous_ttl: float = 600
    max_signed_in: int = 10_000
    max_per_user: int = 20
    max_anonymous: int = 10_000


class SessionBackend(Protocol):
    """Where sessions live. Keys are keyed hashes of session ids; records map field names to bytes. Every
    method raises `StoreUnavailable` when the backend cannot be reached."""

    async def get(self, key: str, now: float) -> dict[str, bytes] | None:
        """The record (and it becomes the most recently used of its pool), or None."""

    async def create(self, key: str, record: dict[str, bytes], ttl: float, user: str | None, now: float) -> None:
        """Store a new record in the anonymous pool (`user` None) or the signed-in one, within the bounds."""

    async def update(self, key: str, record: dict[str, bytes]) -> None:
        """Replace these fields of an existing record; nothing when it no longer exists."""

    async def delete(self, key: str) -> None: ...

    def lock(self, key: str) -> AbstractAsyncContextManager[None]:
        """Exclusive among every replica (an OIDC refresh: a refresh token is good for one use)."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


class SessionStore:
    """Creates, loads, writes back and drops sessions; signs and checks the cookie value; seals the fields."""

    def __init__(self, backend: SessionBackend, secret: str, bounds: Bounds | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.bounds = bounds or Bounds()
        self._master = hashlib.sha256(("maas-console-session:" + (secret or secrets.token_hex(32))).encode()).digest()
        self._clock = clock

    def _mac(self, label: bytes, value: str) -> bytes:
        return hmac.new(self._master, label + value.encode(), hashlib.sha256).digest()

    def _key(self, sid: str) -> str:
        return self._mac(b"id:", sid).hex()

    def _user(self, username: str) -> str:
        return self._mac(b"user:", username).hex()[:32]

    def _seal(self, sid: str, name: str, value: str) -> bytes:
        nonce = os.urandom(12)
        return nonce + AESGCM(self._mac(b"seal:", sid)).encrypt(nonce, value.encode(), name.encode())

    def _open(self, sid: str, name: str, sealed: bytes) -> str:
        return AESGCM(self._mac(b"seal:", sid)).decrypt(sealed[:12], sealed[12:], name.encode()).decode()

    def cookie_value(self, session: Session) -> str:
        mac = base64.urlsafe_b64encode(self._mac(b"cookie:", session.sid)).decode().rstrip("=")
        return f"{session.sid}.{mac}"

    def _sid(self, cookie: str | None) -> str | None:
        if not cookie or cookie.count(".") != 1:
            return None
        sid = cookie.split(".")[0]
        return sid if sid and hmac.compare_digest(cookie.encode(), self.cookie_value(Session(sid, "", 0)).encode()) \
            else None

    # -- sessions this request starts (stored by `persist`) --------------------------------------------
    def new(self) -> Session:
        """An anonymous session (the sign-in form's CSRF token, an OIDC request in flight)."""
        return Session(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32),
                       expires=self._clock() + self.bounds.anonymous_ttl)

    def signed_in(self, identity: Identity) -> Session:
        """A new session (new id, new CSRF token) for `identity`. Without a refresh token it ends with the
        credential."""
        session = self.new()
        session.identity = identity
        session.expires = self._clock() + self.bounds.signed_in_ttl
        if identity.refresh_token is None and identity.expires_at is not None:
            session.expires = min(session.expires, identity.expires_at)
        return session

    # -- the backend ------------------------------------------------------------------------------------
    async def load(self, cookie: str | None) -> Session | None:
        """The live session named by a cookie value, or None (unsigned, forged, expired or unknown)."""
        sid = self._sid(cookie)
        if sid is None:
            return None
        key = self._key(sid)
        record = await self.backend.get(key, self._clock())
        if not record:
            return None
        try:
            expires = float(record["expires"].decode())
            stored = {name: self._open(sid, name, record[name]) for name in SEALED}
            identity = _identity(stored["identity"])
            pending = _pending(stored["pending"])
            flashes = [(k, m) for k, m in json.loads(stored["flashes"])]
            once = dict(json.loads(stored["once"]))
        except (KeyError, ValueError, TypeError, InvalidTag):
            await self.backend.delete(key)  # not a record this secret wrote: never trusted
            return None
        now = self._clock()
        if expires <= now or (identity is not None and identity.expired(now)):
            await self.backend.delete(key)
            return None
        return Session(sid=sid, csrf=stored["csrf"], expires=expires, identity=identity, pending=pending,
                       flashes=flashes, _once=once, _stored=stored)

    async def persist(self, session: Session) -> None:
        """Write what this request changed: a new session whole (within the bounds), a known one field by
        field, and only while it still exists."""
        fields = session.fields()
        key = self._key(session.sid)
        if session._stored is None:
            record = {name: self._seal(session.sid, name, value) for name, value in fields.items()}
            record["expires"] = repr(session.expires).encode()
            user = self._user(session.identity.username) if session.identity is not None else None
            record["u"] = (user or "").encode()
            await self.backend.create(key, record, session.expires - self._clock(), user, self._clock())
        else:
            changed = {name: self._seal(session.sid, name, value) for name, value in fields.items()
                       if session._stored.get(name) != value}
            if changed:
                await self.backend.update(key, changed)
        session._stored = fields

    async def drop(self, session: Session) -> None:
        await self.backend.delete(self._key(session.sid))

    def lock(self, session: Session) -> AbstractAsyncContextManager[None]:
        return self.backend.lock(self._key(session.sid))

    async def current_identity(self, session: Session) -> Identity | None:
        """The identity as stored now (another replica may have renewed it), adopted by this request's copy;
        None when the session has ended meanwhile."""
        fresh = await self.load(self.cookie_value(session))
        if fresh is None or fresh.identity is None:
            return None
        session.identity = fresh.identity
        if session._stored is not None and fresh._stored is not None:
            session._stored["identity"] = fresh._stored["identity"]
        return fresh.identity


# -- this process's memory -----------------------------------------------------------------------------
class MemoryBackend:
    """Sessions in this process: one replica, and a restart signs everyone out (`maasctl dev`, tests)."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self._records: dict[str, dict[str, bytes]] = {}
        self._anonymous: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._signed_in: OrderedDict[str, str] = OrderedDict()  # key -> user
        self._per_user: dict[str, OrderedDict[str, None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._records)

    async def get(self, key: str, now: float) -> dict[str, bytes] | None:
        record = self._records.get(key)
        if record is None:
            return None
        if key in self._anonymous:
            self._anonymous.move_to_end(key)
        elif key in self._signed_in:
            self._signed_in.move_to_end(key)
            self._per_user[self._signed_in[key]].move_to_end(key)
        return dict(record)

    async def create(self, key: str, record: dict[str, bytes], ttl: float, user: str | None, now: float) -> None:
        if user is None:
            while len(self._anonymous) >= max(1, self.bounds.max_anonymous):
                await self.delete(next(iter(self._anonymous)))
            self._anonymous[key] = None
        else:
            mine = self._per_user.setdefault(user, OrderedDict())
            while len(mine) >= max(1, self.bounds.max_per_user):
                await self.delete(next(iter(mine)))
            while len(self._signed_in) >= max(1, self.bounds.max_signed_in):
                await self.delete(next(iter(self._signed_in)))
            self._signed_in[key] = user
            self._per_user.setdefault(user, OrderedDict())[key] = None
        self._records[key] = dict(record)

    async def update(self, key: str, record: dict[str, bytes]) -> None:
        if key in self._records:
            self._records[key].update(record)

    async def delete(self, key: str) -> None:
        self._records.pop(key, None)
        self._anonymous.pop(key, None)
        user = self._signed_in.pop(key, None)
        if user is not None:
            mine = self._per_user.get(user)
            if mine is not None:
                mine.pop(key, None)
                if not mine:
                    del self._per_user[user]

    @asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked():
                self._locks.pop(key, None)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

