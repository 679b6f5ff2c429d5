"""Server-side sessions: the browser holds only a random, HMAC-signed session id in an HttpOnly, SameSite
cookie; the user's credential, CSRF token and one-time secrets stay in this process.

A new id is issued at every sign-in and sign-out (no session fixation). Sessions live in memory, bounded in
number: the console runs as one replica, and a restart only means signing in again. Anonymous and signed-in
sessions are bounded separately (`SessionStore`), so requests without a cookie cannot evict anyone signed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

COOKIE_NAME = "maas_console_session"


@dataclass(frozen=True)
class Identity:
    """Who is signed in. `credential` is the bearer token used on their behalf (never rendered or logged)."""

    username: str
    groups: tuple[str, ...]
    credential: str = field(repr=False)
    via: Literal["token", "oidc"] = "token"
    expires_at: float | None = None  # the credential's own expiry (OIDC ID token), if known


@dataclass(frozen=True)
class PendingLogin:
    """An OIDC authorization request in flight (state, nonce, PKCE verifier)."""

    state: str
    nonce: str
    verifier: str = field(repr=False)
    created: float


@dataclass
class Session:
    sid: str
    csrf: str
    expires: float
    identity: Identity | None = None
    pending: PendingLogin | None = None
    flashes: list[tuple[str, str]] = field(default_factory=list)
    _once: dict[str, str] = field(default_factory=dict, repr=False)

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


class SessionStore:
    """Creates, finds, rotates and drops sessions; signs and checks the cookie value.

    Two pools, so that anonymous traffic (every cookie-less page view makes a session) can never evict a
    signed-in user: anonymous sessions live `anonymous_ttl_seconds` and, at `max_anonymous`, evict only the
    least recently used anonymous one; signed-in sessions are bounded in total (`max_sessions`) and per user
    (`max_per_user`: a user's next sign-in evicts that user's least recently used session, nobody else's).
    """

    def __init__(self, secret: str, ttl_seconds: int, max_sessions: int,
                 clock: Callable[[], float] = time.time, *, anonymous_ttl_seconds: int = 600,
                 max_anonymous: int = 10_000, max_per_user: int = 20) -> None:
        self._key = hashlib.sha256(("maas-console-session:" + (secret or secrets.token_hex(32))).encode()).digest()
        self._ttl = ttl_seconds
        self._max = max(1, max_sessions)
        self._anonymous_ttl = anonymous_ttl_seconds
        self._max_anonymous = max(1, max_anonymous)
        self._max_per_user = max(1, max_per_user)
        self._clock = clock
        self._anonymous: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._signed_in: OrderedDict[str, Session] = OrderedDict()
        self._per_user: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._anonymous) + len(self._signed_in)

    def _sign(self, sid: str) -> str:
        mac = hmac.new(self._key, sid.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def cookie_value(self, session: Session) -> str:
        return f"{session.sid}.{self._sign(session.sid)}"

    def new(self) -> Session:
        """An anonymous session (the sign-in form's CSRF token, an OIDC request in flight)."""
        while len(self._anonymous) >= self._max_anonymous:
            self._anonymous.popitem(last=False)
        session = self._create(self._anonymous_ttl)
        self._anonymous[session.sid] = session
        return session

    def _create(self, ttl: int) -> Session:
        return Session(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), expires=self._clock() + ttl)

    def _sign_in(self, identity: Identity) -> Session:
        self._make_room(identity.username)
        session = self._create(self._ttl)
        session.identity = identity
        if identity.expires_at is not None:
            session.expires = min(session.expires, identity.expires_at)
        self._signed_in[session.sid] = session
        self._per_user[identity.username] += 1
        return session

    def _make_room(self, username: str) -> None:
        """Per-user cap first (the user's own least recently used session), then the global bound."""
        if self._per_user[username] >= self._max_per_user:
            self._forget(next(sid for sid, s in self._signed_in.items()
                              if s.identity is not None and s.identity.username == username))
        while len(self._signed_in) >= self._max:
            self._forget(next(iter(self._signed_in)))

    def _forget(self, sid: str) -> None:
        self._anonymous.pop(sid, None)
        session = self._signed_in.pop(sid, None)
        if session is not None and session.identity is not None:
            user = session.identity.username
            self._per_user[user] -= 1
            if self._per_user[user] <= 0:
                del self._per_user[user]

    def find(self, cookie: str | None) -> Session | None:
        """The live session named by a cookie value, or None (unsigned, forged, expired or unknown)."""
        if not cookie or cookie.count(".") != 1:
            return None
        sid, mac = cookie.split(".")
        if not hmac.compare_digest(mac.encode(), self._sign(sid).encode()):
            return None
        pool = self._signed_in if sid in self._signed_in else self._anonymous
        session = pool.get(sid)
        if session is None:
            return None
        now = self._clock()
        expired = session.expires <= now or (
            session.identity is not None and session.identity.expires_at is not None
            and session.identity.expires_at <= now)
        if expired:
            self._forget(sid)
            return None
        pool.move_to_end(sid)
        return session

    def rotate(self, old: Session | None, identity: Identity | None) -> Session:
        """Drop `old` and start a fresh session (new id, new CSRF token): signed in for `identity`, else
        anonymous."""
        if old is not None:
            self._forget(old.sid)
        return self.new() if identity is None else self._sign_in(identity)

    def drop(self, session: Session) -> None:
        self._forget(session.sid)
