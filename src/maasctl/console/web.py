"""What every page handler uses: the console's shared state, the signed-in user, the admin check, and
rendering with the session's CSRF token and flash messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from maasctl.console import nav
from maasctl.console.billing import nav as billing_nav
from maasctl.console.kube import Kube, UserKube
from maasctl.console.maasapi_client import MaasApi, UserMaasApi
from maasctl.console.oidc import OidcClient
from maasctl.console.renewal import RenewalUnavailable, SessionEnded, renewed
from maasctl.console.sessions import Identity, Session, SessionStore, StoreUnavailable
from maasctl.console.settings import ConsoleSettings


@dataclass
class Console:
    settings: ConsoleSettings
    sessions: SessionStore
    kube: Kube
    maasapi: MaasApi
    templates: Jinja2Templates
    oidc: OidcClient | None = None

    def is_admin(self, identity: Identity) -> bool:
        return bool(set(identity.groups) & set(self.settings.admin_groups))


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


class Forbidden(Exception):
    """Signed in, but not allowed here (not in an admin group)."""


def console(request: Request) -> Console:
    state: Console = request.app.state.console
    return state


def session_of(request: Request) -> Session | None:
    session: Session | None = request.state.session
    return session


def ensure_session(request: Request) -> Session:
    """The visitor's session, creating an anonymous one (for the sign-in form's CSRF token)."""
    session = session_of(request)
    if session is None:
        session = console(request).sessions.new()
        request.state.session = session
    return session


def safe_next(path: str | None) -> str:
    """Only local paths: no scheme, no host, no `//` or backslash tricks (no open redirect)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path or any(
            ord(c) < 0x20 for c in path):
        return "/"
    return path


async def current_user(request: Request) -> Identity:
    """The signed-in user, with an OIDC credential renewed when due (`console.renewal`). A session that
    cannot go on is ended here: the user lands on the sign-in page with the reason."""
    session = session_of(request)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if session is None or session.identity is None:
        raise SignInRequired(target if request.method == "GET" else "/")
    ctx = console(request)
    try:
        return await renewed(session.identity, session, ctx.sessions, ctx.oidc, ctx.kube)
    except SessionEnded as exc:
        request.state.session = None
        flash(request, "warning", str(exc))  # on a new anonymous session, shown by the sign-in page
        raise SignInRequired(target if request.method == "GET" else "/") from exc
    except RenewalUnavailable as exc:
        raise HTTPException(503, "Your sign-in could not be renewed: the identity provider cannot be reached. "
                                 "Try again in a moment.") from exc
    except StoreUnavailable as exc:  # the refresh lock or the renewed identity could not be stored
        raise HTTPException(503, "Your sign-in could not be renewed right now. Try again in a moment.") from exc


async def current_admin(request: Request) -> Identity:
    identity = await current_user(request)
    if not console(request).is_admin(identity):
        raise Forbidden()
    return identity


User = Annotated[Identity, Depends(current_user)]
Admin = Annotated[Identity, Depends(current_admin)]


def kube_as(request: Request, identity: Identity) -> UserKube:
    return console(request).kube.as_user(identity.credential)


def maasapi_as(request: Request, identity: Identity) -> UserMaasApi:
    return console(request).maasapi.as_user(identity.credential)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    ctx = console(request)
    session = ensure_session(request)
    identity = session.identity
    admin = identity is not None and ctx.is_admin(identity)
    return ctx.templates.TemplateResponse(request, template, {
        "identity": identity,
        "is_admin": admin,
        "nav": nav.items(admin) if identity is not None else [],
        "billing_nav": billing_nav.section(ctx.settings.billing, identity),
        "csrf_token": session.csrf,
        "flashes": session.take_flashes(),
        "path": request.url.path,
        "oidc_enabled": ctx.oidc is not None,
        **context,
    }, status_code=status_code)


def redirect(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def flash(request: Request, kind: str, message: str) -> None:
    ensure_session(request).flash(kind, message)


def q(value: str) -> str:
    return quote(value, safe="")
