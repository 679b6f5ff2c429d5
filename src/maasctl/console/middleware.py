"""One ASGI middleware for what every request needs: the session (from a signed cookie), the CSRF check on
every POST, the session written back and its cookie on the way out, and security headers (CSP without any
outside origin, no framing, no referrer, no caching of pages that carry personal data).

The CSRF check lives here rather than in each route so that no POST can forget it: the form body is read,
its `csrf_token` compared (constant time) with the session's, and replayed to the route.

Every session write happens here, once, as the response starts: the request's session is persisted (what
changed), and the incoming one is dropped when a route replaced it (sign-in: `SessionStore.signed_in`) or
ended it (sign-out, a refused refresh: `request.state.session = None`). Routes never write the store. When the
store cannot be reached the answer is 503, never a page served without its session.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import structlog

from maasctl.console.sessions import COOKIE_NAME, Session, SessionStore, StoreUnavailable

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = structlog.get_logger("maasctl.console")
MAX_FORM_BYTES = 1 << 20
NO_SESSION_PATHS = ("/static/", "/healthz", "/readyz")  # no page, no session: not a store read each
UNAVAILABLE = "the console's session store cannot be reached: try again in a moment"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


def _cookie(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed cookie header is treated as no cookie
                return None
            morsel = jar.get(COOKIE_NAME)
            if morsel is not None:
                return morsel.value
    return None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return ""


async def _respond(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})


class ConsoleMiddleware:
    def __init__(self, app: ASGIApp, sessions: SessionStore, secure_cookies: bool) -> None:
        self.app = app
        self.sessions = sessions
        self.secure = secure_cookies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
        path: str = scope.get("path") or ""
        try:
            cookie = None if path.startswith(NO_SESSION_PATHS) else _cookie(headers)
            incoming = await self.sessions.load(cookie)
        except StoreUnavailable:
            log.error("console_session_store_unavailable")
            await _respond(send, 503, UNAVAILABLE)
            return
        state = scope.setdefault("state", {})
        state["session"] = incoming
        if scope["method"] not in ("GET", "HEAD"):
            if scope["method"] != "POST":
                await _respond(send, 405, "method not allowed")
                return
            body = await self._read_form(scope, receive, send)
            if body is None:
                return
            if incoming is None or not self._csrf_ok(incoming, body):
                await _respond(send, 403, "the form expired or did not come from this console: reload the page "
                                          "and try again")
                return
            receive = self._replay(body, receive)

        failed = False

        async def send_with_headers(message: Message) -> None:
            nonlocal failed
            if failed:  # the 503 went out instead of this response: its body is dropped
                return
            if message["type"] == "http.response.start":
                current: Session | None = state.get("session")
                try:
                    await self._write_back(incoming, current)
                except StoreUnavailable:
                    log.error("console_session_store_unavailable")
                    failed = True
                    await _respond(send, 503, UNAVAILABLE)
                    return
                out = list(message.get("headers") or [])
                out.extend(SECURITY_HEADERS)
                if not any(k == b"cache-control" for k, _ in out):
                    out.append((b"cache-control", b"no-store"))
                if current is not None and current is not incoming:
                    out.append((b"set-cookie", self._set_cookie(current)))
                elif current is None and incoming is not None:
                    out.append((b"set-cookie", self._clear_cookie()))
                message["headers"] = out
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _write_back(self, incoming: Session | None, current: Session | None) -> None:
        if incoming is not None and current is not incoming:
            await self.sessions.drop(incoming)
        if current is not None:
            await self.sessions.persist(current)

    async def _read_form(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        ctype = _header(scope.get("headers") or [], b"content-type").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            await _respond(send, 415, "forms only")
            return None
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                await _respond(send, 413, "form too large")
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        return b"".join(chunks)

    @staticmethod
    def _csrf_ok(session: Session, body: bytes) -> bool:
        try:
            values = parse_qs(body.decode("utf-8"), keep_blank_values=True).get("csrf_token") or []
        except UnicodeDecodeError:
            return False
        return len(values) == 1 and hmac.compare_digest(values[0].encode(), session.csrf.encode())

    @staticmethod
    def _replay(body: bytes, original: Receive) -> Receive:
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return await original()  # after the body: wait for the real disconnect
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return receive

    def _attrs(self) -> str:
        return "; Path=/; HttpOnly; SameSite=Lax" + ("; Secure" if self.secure else "")

    def _set_cookie(self, session: Session) -> bytes:
        return f"{COOKIE_NAME}={self.sessions.cookie_value(session)}{self._attrs()}".encode()

    def _clear_cookie(self) -> bytes:
        return f"{COOKIE_NAME}=; Max-Age=0{self._attrs()}".encode()
