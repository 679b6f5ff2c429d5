"""Sign-in (a Kubernetes bearer token, or OIDC), sign-out. Each successful sign-in starts a new session."""

from __future__ import annotations

import hmac
from typing import Annotated

import structlog
from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from maasctl.console.kube import KubeError
from maasctl.console.oidc import OidcError
from maasctl.console.sessions import Identity
from maasctl.console.web import console, ensure_session, redirect, render, safe_next, session_of

log = structlog.get_logger("maasctl.console")
router = APIRouter()
CALLBACK_PATH = "/signin/oidc/callback"


@router.get("/")
async def home(request: Request) -> Response:
    session = session_of(request)
    if session is None or session.identity is None:
        return redirect("/signin")
    # an administrator lands on the overview (an empty "My Subscriptions" leads nowhere), a developer on theirs
    return redirect("/admin/overview" if console(request).is_admin(session.identity) else "/my/subscriptions")


@router.get("/signin")
async def signin_page(request: Request, next: str | None = None) -> Response:
    ensure_session(request)
    return render(request, "signin.html", next=safe_next(next), error=None)


@router.post("/signin")
async def signin_token(request: Request, token: Annotated[str, Form(max_length=16384)] = "",
                       next: Annotated[str, Form(max_length=2048)] = "/") -> Response:
    ctx = console(request)
    token = token.strip()
    error = None
    who: tuple[str, tuple[str, ...]] | None = None
    if not token:
        error = "Enter a Kubernetes bearer token."
    else:
        try:
            who = await ctx.kube.token_review(token)
        except KubeError:
            log.warning("console_token_review_failed")
            error = "The token cannot be checked right now (TokenReview failed). Try again later."
        if who is None and error is None:
            error = "The Kubernetes API server did not accept this token."
    if who is None:
        log.info("console_signin_refused", via="token")
        return render(request, "signin.html", 401, next=safe_next(next), error=error)
    identity = Identity(username=who[0], groups=who[1], credential=token, via="token")
    request.state.session = ctx.sessions.signed_in(identity)  # a new id; the middleware drops the old one
    log.info("console_signin", user=identity.username, via="token")
    return redirect(safe_next(next))


@router.get("/signin/oidc")
async def signin_oidc(request: Request) -> Response:
    ctx = console(request)
    if ctx.oidc is None:
        return render(request, "signin.html", 404, next="/", error="OIDC sign-in is not configured.")
    session = ensure_session(request)
    session.pending = ctx.oidc.new_pending()
    try:
        url = await ctx.oidc.authorization_url(session.pending)
    except OidcError as exc:
        return render(request, "signin.html", 502, next="/", error=str(exc))
    return redirect(url)


@router.get(CALLBACK_PATH)
async def oidc_callback(request: Request, code: str = "", state: str = "", error: str = "") -> Response:
    ctx = console(request)
    session = session_of(request)
    pending = session.pending if session is not None else None
    if ctx.oidc is None or session is None or pending is None:
        return render(request, "signin.html", 400, next="/", error="This sign-in was not started here: try again.")
    session.pending = None  # one use only

    if error or not code or not hmac.compare_digest(state.encode(), pending.state.encode()):
        log.info("console_signin_refused", via="oidc", reason="state_or_error")
        return render(request, "signin.html", 400, next="/", error="The identity provider did not complete the "
                      "sign-in." if error else "The sign-in response does not match this browser's request.")
    try:
        tokens = await ctx.oidc.exchange(code, pending)
        who = await ctx.kube.token_review(tokens.id_token)
    except OidcError as exc:
        return render(request, "signin.html", 401, next="/", error=str(exc))
    except KubeError:
        return render(request, "signin.html", 503, next="/", error="The token cannot be checked right now.")
    if who is None:
        log.info("console_signin_refused", via="oidc", reason="token_review")
        return render(request, "signin.html", 401, next="/", error="The Kubernetes API server does not accept "
                      "tokens of this identity provider (is it configured with the same issuer and client id?).")
    identity = Identity(username=who[0], groups=who[1], credential=tokens.id_token, via="oidc",
                        expires_at=tokens.expires_at, issued_at=tokens.issued_at, refresh_token=tokens.refresh_token)
    request.state.session = ctx.sessions.signed_in(identity)
    log.info("console_signin", user=identity.username, via="oidc", renewable=tokens.refresh_token is not None)
    return redirect("/")


@router.post("/signout")
async def signout(request: Request) -> Response:
    request.state.session = None  # the middleware deletes the session from the store: every replica
    return redirect("/signin")
