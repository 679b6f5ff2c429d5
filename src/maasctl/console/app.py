"""The console application: `create_app(...)` wires state, middleware, pages and error pages;
`serve(settings)` runs it on uvicorn."""

from __future__ import annotations

from pathlib import Path

import jinja2
import structlog
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from maasctl.console import filters
from maasctl.console.billing import admin as billing_admin
from maasctl.console.billing import credits as billing_credits
from maasctl.console.billing import pages as billing_pages
from maasctl.console.billing import portal as billing_portal
from maasctl.console.kube import Kube, cluster_access
from maasctl.console.maasapi_client import MaasApi
from maasctl.console.middleware import ConsoleMiddleware
from maasctl.console.oidc import OidcClient
from maasctl.console.pages import (
    admin_guardrails,
    admin_models,
    admin_overview,
    admin_report,
    admin_services,
    admin_subscriptions,
    auth,
    user,
)
from maasctl.console.sessions import Bounds, MemoryBackend, SessionBackend, SessionStore, StoreUnavailable
from maasctl.console.settings import ConsoleSettings
from maasctl.console.web import Console, Forbidden, SignInRequired, redirect, render
from maasctl.httpguard import HttpGuard, HttpLimits, relative_slash_redirects, uvicorn_options

log = structlog.get_logger("maasctl.console")
HERE = Path(__file__).parent


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every value is escaped unless a filter returns Markup built from escaped parts
        undefined=jinja2.StrictUndefined,
    )
    filters.install(env)
    return Jinja2Templates(env=env)


def session_backend(settings: ConsoleSettings, bounds: Bounds) -> SessionBackend:
    """Redis when configured (replicas share sessions), else this process's memory."""
    if settings.redis_url:
        from maasctl.console.redis_sessions import RedisBackend

        return RedisBackend(settings.redis_url, bounds)
    return MemoryBackend(bounds)


def create_app(settings: ConsoleSettings, kube: Kube, maasapi: MaasApi, oidc: OidcClient | None = None,
               backend: SessionBackend | None = None) -> FastAPI:
    app = FastAPI(title="MaaS console", docs_url=None, redoc_url=None, openapi_url=None)
    relative_slash_redirects(app.router)
    bounds = Bounds(signed_in_ttl=settings.session_ttl_seconds, anonymous_ttl=settings.anonymous_session_ttl_seconds,
                    max_signed_in=settings.max_sessions, max_per_user=settings.max_sessions_per_user,
                    max_anonymous=settings.max_anonymous_sessions)
    sessions = SessionStore(backend if backend is not None else session_backend(settings, bounds),
                            settings.session_secret, bounds)
    app.state.console = Console(settings, sessions, kube, maasapi, templates(), oidc)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    for module in (auth, user, admin_overview, admin_models, admin_services, admin_subscriptions, admin_guardrails,
                   admin_report, billing_pages, billing_admin, billing_portal, billing_credits):
        app.include_router(module.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> PlainTextResponse:
        """Ready while the session store answers (without it no page can be served)."""
        try:
            await sessions.backend.ping()
        except StoreUnavailable:
            return PlainTextResponse("session store unreachable", status_code=503)
        return PlainTextResponse("ok")

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        from urllib.parse import quote

        return redirect(f"/signin?next={quote(exc.next_path, safe='')}")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> HTMLResponse:
        return render(request, "error.html", 403, title="Not allowed",
                      message="This page is for MaaS administrators (members of an administrator group).")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
        title = "Not found" if exc.status_code == 404 else "Error"
        message = "There is no such page." if exc.status_code == 404 else str(exc.detail)
        return render(request, "error.html", exc.status_code, title=title, message=message)

    app.add_middleware(ConsoleMiddleware, sessions=sessions, secure_cookies=settings.secure_cookies)
    return app


async def serve_async(settings: ConsoleSettings) -> None:
    kube = Kube(await cluster_access(settings.kubeconfig))
    maasapi = MaasApi(settings.maas_api_url)
    oidc = OidcClient(settings.oidc, settings.public_url.rstrip("/") + auth.CALLBACK_PATH) if settings.oidc else None
    app = create_app(settings, kube, maasapi, oidc)
    limits = HttpLimits()
    server = uvicorn.Server(uvicorn.Config(HttpGuard(app, limits), host=settings.host, port=settings.port,
                                           access_log=False, log_config=None, server_header=False, lifespan="off",
                                           **uvicorn_options(limits)))
    log.info("console_starting", host=settings.host, port=settings.port, public_url=settings.public_url,
             oidc=settings.oidc is not None, sessions="redis" if settings.redis_url else "memory",
             admin_groups=list(settings.admin_groups))
    try:
        await server.serve()
    finally:
        await app.state.console.sessions.backend.close()
        await kube.close()
        await maasapi.close()
        if oidc is not None:
            await oidc.close()
