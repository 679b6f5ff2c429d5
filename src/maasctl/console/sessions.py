"""Server-side sessions: the browser holds only a random, HMAC-signed session id in an HttpOnly, SameSite
cookie; the user's credential, CSRF token and one-time secrets stay in this process.

A new id is issued at every sign-in and sign-out (no session fixation). Sessions live in memory, bounded in
number (oldest evicted first): the console runs as one replica, and a restart only means signing in again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
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
    """Creates, finds, rotates and drops sessions; signs and checks the cookie value."""

    def __init__(self, secret: str, ttl_seconds: int, max_sessions: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._key = hashlib.sha256(("maas-console-session:" + (secret or secrets.token_hex(32))).encode()).digest()
        self._ttl = ttl_seconds
        self._max = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def _sign(self, sid: str) -> str:
        mac = hmac.new(self._key, sid.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def cookie_value(self, session: Session) -> str:
        return f"{session.sid}.{self._sign(session.sid)}"

    def new(self) -> Session:
        while len(self._sessions) >= self._max:
            self._sessions.popitem(last=False)
        sid = secrets.token_urlsafe(32)
        session = Session(sid=sid, csrf=secrets.token_urlsafe(32), expires=self._clock() + self._ttl)
        self._sessions[sid] = session
        return session

    def find(self, cookie: str | None) -> Session | None:
        """The live session named by a cookie value, or None (unsigned, forged, expired or unknown)."""
        if not cookie or cookie.count(".") != 1:
            return None
        sid, mac = cookie.split(".")
        if not hmac.compare_digest(mac.encode(), self._sign(sid).encode()):
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        now = self._clock()
        expired = session.expires <= now or (
            session.identity is not None and session.identity.expires_at is not None
            and session.identity.expires_at <= now)
        if expired:
            self._sessions.pop(sid, None)
            return None
        self._sessions.move_to_end(sid)
        return session

    def rotate(self, old: Session | None, identity: Identity | None) -> Session:
        """Drop `old` and start a fresh session (new id, new CSRF token) for `identity`."""
        if old is not None:
            self._sessions.pop(old.sid, None)
        session = self.new()
        session.identity = identity
        if identity is not None and identity.expires_at is not None:
            session.expires = min(session.expires, identity.expires_at)
        return session

    def drop(self, session: Session) -> None:
        self._sessions.pop(session.sid, None)
