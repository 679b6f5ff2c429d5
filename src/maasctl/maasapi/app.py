"""The maas-api FastAPI application: `create_app(settings, subscription_source, authenticator)`.

Routers live in `maasctl.maasapi.routes` (one module per resource) and `maasctl.maasapi.usage`; this module
only wires them with the lifespan (database, migrations, probe client) and the middleware stack.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from maasctl.httpguard import relative_slash_redirects
from maasctl.maasapi import migrate
from maasctl.maasapi.auth import Authenticator
from maasctl.maasapi.deps import AppState, access_of, caller_identity, subscriptions_of
from maasctl.maasapi.errors import install_error_handlers
from maasctl.maasapi.fastpath import VALIDATE_PATH, ValidateFastPath
from maasctl.maasapi.gatewayauth import gateway_token_valid
from maasctl.maasapi.keycache import KeyCache, KeyCacheListener
from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.middleware import AccessLogMiddleware, BodyLimitMiddleware, IdentityHeaderMiddleware
from maasctl.maasapi.routes import internal, keys, meta, models, subscriptions
from maasctl.maasapi.service import KeyService
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import (
    BillingSource,
    GrantSource,
    ModelSource,
    OrganizationSource,
    SubscriptionSource,
)
from maasctl.maasapi.store import KeyStore, make_engine
from maasctl.maasapi.usage import api as usage_api

__all__ = ["AppState", "create_app"]


def create_app(
    settings: MaasApiSettings,
    subscription_source: SubscriptionSource,
    authenticator: Authenticator,
    *,
    store: KeyStore | None = None,
    metrics: ApiMetrics | None = None,
    model_source: ModelSource | None = None,
    probe_client: httpx.AsyncClient | None = None,
    organization_source: OrganizationSource | None = None,
    grant_source: GrantSource | None = None,
    billing_source: BillingSource | None = None,
) -> FastAPI:
    """Build the app. Without `store`, the lifespan opens `settings.database_url` and runs migrations. The
    organization administrators come from `organization_source`, else from `subscription_source` when it
    provides them, else nobody is one; the MaaSAuthPolicies the same way (`grant_source`), and the billing kinds
    (`billing_source`)."""
    if organization_source is None and isinstance(subscription_source, OrganizationSource):
        organization_source = subscription_source
    if grant_source is None and isinstance(subscription_source, GrantSource):
        grant_source = subscription_source
    if billing_source is None and isinstance(subscription_source, BillingSource):
        billing_source = subscription_source
    state = AppState(settings, subscription_source, authenticator, metrics or ApiMetrics(), models=model_source,
                     organizations=organization_source, grants=grant_source, billing=billing_source)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        owned = store is None
        st = store or KeyStore(make_engine(settings.database_url, settings.db_pool_size), settings.db_pool_size)
        if settings.run_migrations:
            try:
                await migrate.upgrade(st.engine)
            except BaseException:
                if owned:
                    await st.close()
                raise
        state.store = st
        cache, listener = _key_cache(st, settings, state.metrics)
        state.service = KeyService(st, settings, cache=cache)
        state.key_cache_listener = listener
        http = probe_client or httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=settings.model_probe_ca_file)
            if settings.model_probe_ca_file
            else True,
            follow_redirects=False,
            timeout=settings.model_probe_timeout,
            limits=httpx.Limits(max_connections=100),
        )
        state.probe_http = http
        try:
            yield
        finally:
            if listener is not None:
                await listener.stop()
            st.on_changed = None
            state.key_cache_listener = None
            state.service = None
            state.store = None
            state.probe_http = None
            if probe_client is None:
                await http.aclose()
            if owned:
                await st.close()

    app = FastAPI(
        title="maas-api",
        version="1",
        lifespan=lifespan,
        description="API keys bound to MaaSSubscriptions, subscriptions and gateway callbacks.",
    )
    relative_slash_redirects(app.router)
    app.state.maasapi = state
    install_error_handlers(app)
    for router in (meta.router, keys.router, subscriptions.router, internal.router, models.router):
        app.include_router(router)
    usage_api.install(app, usage_api.UsageDeps(caller=caller_identity, access=access_of,
                                               subscriptions=subscriptions_of))
    validate_route = next(r for r in internal.router.routes if getattr(r, "path", None) == VALIDATE_PATH)
    def gateway_caller(authorization: bytes | None) -> bool:
        if gateway_token_valid(authorization, settings.gateway_tokens):
            return True
        state.metrics.internal_unauthenticated.labels("validate").inc()
        return False

    app.add_middleware(ValidateFastPath, handler=lambda key: internal.validate_payload(state, key),
                       authorized=gateway_caller, route=validate_route)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(IdentityHeaderMiddleware)
    app.add_middleware(AccessLogMiddleware, metrics=state.metrics)
    return app


def _key_cache(store: KeyStore, settings: MaasApiSettings,
               metrics: ApiMetrics) -> tuple[KeyCache | None, KeyCacheListener | None]:
    """The validation key cache and its running listener (PostgreSQL with a positive max age only)."""
    dsn = store.pg_dsn
    if dsn is None or settings.key_cache_max_age <= 0:
        return None, None
    cache = KeyCache(settings.key_cache_max_entries, settings.key_cache_max_age, metrics)
    store.on_changed = cache.changed_here
    listener = KeyCacheListener(dsn, cache)
    listener.start()
    return cache, listener
