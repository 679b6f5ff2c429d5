"""The maas-api FastAPI application: `create_app(settings, subscription_source, authenticator)`."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from maasctl.maasapi import keys, migrate
from maasctl.maasapi.auth import Authenticator, Identity
from maasctl.maasapi.errors import ApiError, error_body, install_error_handlers
from maasctl.maasapi.fastpath import INVALID, VALIDATE_PATH, ValidateFastPath
from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.middleware import AccessLogMiddleware, BodyLimitMiddleware
from maasctl.maasapi.models import ModelSource, accessible
from maasctl.maasapi.schemas import (
    BulkRevokeRequest,
    BulkRevokeResponse,
    CleanupResponse,
    Health,
    KeyConfig,
    KeyList,
    KeyStatus,
    KeyView,
    MintRequest,
    MintResponse,
    ModelList,
    ModelRefView,
    ModelView,
    SearchRequest,
    SelectRequest,
    SelectResponse,
    SubscriptionList,
    SubscriptionRevokeResponse,
    SubscriptionView,
    TokenRateLimitView,
    ValidateRequest,
    ValidateResponse,
)
from maasctl.maasapi.service import KeyService, MintInput
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.store import KeyRecord, KeyStore, SearchQuery, make_engine
from maasctl.maasapi.subscriptions import (
    SelectionError,
    Subscription,
    SubscriptionSource,
    find,
    rank,
    select_for_request,
)
from maasctl.maasapi.usage import api as usage_api

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    s: {"description": d, "content": {"application/json": {"example": error_body("code", "message")}}}
    for s, d in (
        (400, "Bad request"),
        (401, "Unauthenticated"),
        (403, "Forbidden"),
        (404, "Not found"),
        (413, "Body too large"),
        (422, "Schema violation"),
    )
}


@dataclass
class AppState:
    settings: MaasApiSettings
    subscriptions: SubscriptionSource
    authenticator: Authenticator
    metrics: ApiMetrics
    store: KeyStore | None = None
    service: KeyService | None = None
    models: ModelSource | None = None
    probe_http: httpx.AsyncClient | None = None

    def keys(self) -> KeyService:
        if self.service is None:
            raise ApiError(503, "not_ready", "maas-api is starting")
        return self.service


async def _state(request: Request) -> AppState:
    state: AppState = request.app.state.maasapi
    return state


StateDep = Annotated[AppState, Depends(_state)]


async def _caller(request: Request, st: StateDep, authorization: Annotated[str | None, Header()] = None) -> Identity:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise ApiError(401, "unauthenticated", "missing bearer token", None)
    token = authorization[7:].strip()
    identity: Identity | None
    if keys.looks_like_key(token):
        result = await st.keys().validate(token)
        st.metrics.validations.labels("valid" if result.valid else (result.reason or "invalid")).inc()
        if not result.valid or result.record is None:
            raise ApiError(401, "unauthenticated", "invalid, expired or revoked API key")
        rec = result.record
        identity = Identity(rec.owner, rec.groups, "api_key", rec.id, rec.subscription)
    else:
        try:
            identity = await st.authenticator.authenticate_token(token)
        except Exception as exc:
            raise ApiError(503, "auth_unavailable", "token review is unavailable") from exc
        if identity is None:
            raise ApiError(401, "unauthenticated", "invalid bearer token")
    request.state.maasapi_user = identity.username
    return identity


Caller = Annotated[Identity, Depends(_caller)]


async def _token_caller(caller: Caller) -> Identity:
    """Key management needs a user token: an API key cannot mint, list or revoke keys."""
    if caller.via == "api_key":
        raise ApiError(403, "api_key_not_allowed", "API keys cannot manage API keys; use your user token")
    return caller


TokenCaller = Annotated[Identity, Depends(_token_caller)]


async def _is_admin(st: AppState, caller: Identity, namespace: str | None = None) -> bool:
    try:
        return await st.authenticator.is_admin(caller, namespace or st.settings.subscription_namespace)
    except Exception as exc:
        raise ApiError(503, "auth_unavailable", "access review is unavailable") from exc


def _view(rec: KeyRecord, st: AppState) -> KeyView:
    return KeyView(
        id=rec.id,
        key_prefix=keys.display_prefix(rec.id),
        name=rec.name,
        description=rec.description,
        username=rec.owner,
        subscription=rec.subscription,
        status=rec.status(st.keys().clock()),
        ephemeral=rec.ephemeral,
        labels=rec.labels,
        created_at=rec.created_at,
        expires_at=rec.expires_at,
        revoked_at=rec.revoked_at,
        revoked_by=rec.revoked_by,
        revoke_reason=rec.revoke_reason,
    )


def _sub_view(sub: Subscription) -> SubscriptionView:
    return SubscriptionView(
        id=sub.ref,
        name=sub.name,
        namespace=sub.namespace,
        display_name=sub.display_name,
        description=sub.description,
        priority=sub.priority,
        phase=sub.phase or "Pending",
        model_refs=[
            ModelRefView(
                name=m.name,
                namespace=m.namespace,
                billing_rate=m.billing_per_token,
                token_rate_limits=[TokenRateLimitView(limit=t.limit, window=t.window) for t in m.token_rate_limits],
            )
            for m in sub.model_refs
        ],
        organization_id=sub.organization_id,
        cost_center=sub.cost_center,
        labels=sub.labels,
    )


def _split_subscription(value: str, default_ns: str) -> tuple[str, str]:
    ns, _, name = value.rpartition("/")
    return (ns or default_ns, name)


async def _subscriptions(st: AppState) -> Sequence[Subscription]:
    try:
        return await st.subscriptions.list_subscriptions()
    except Exception as exc:
        raise ApiError(503, "subscriptions_unavailable", "subscriptions cannot be read right now") from exc


async def _validate_payload(st: AppState, key: str) -> dict[str, Any]:
    result = await st.keys().validate(key)
    st.metrics.validations.labels("valid" if result.valid else (result.reason or "invalid")).inc()
    rec = result.record
    if not result.valid or rec is None:
        return {**INVALID, "reason": result.reason}
    return {
        "valid": True,
        "reason": None,
        "userId": rec.id,
        "username": rec.owner,
        "groups": list(rec.groups),
        "keyId": rec.id,
        "keyName": rec.name,
        "subscription": rec.subscription,
    }


def _register_routes(app: FastAPI) -> None:
    @app.get("/health", response_model=Health, tags=["meta"])
    async def health(st: StateDep) -> Health:
        if st.store is None:
            raise ApiError(503, "not_ready", "maas-api is starting")
        return Health()

    @app.get("/v1/api-keys/config", response_model=KeyConfig, tags=["api-keys"], responses=ERROR_RESPONSES)
    async def key_config(st: StateDep, _: TokenCaller) -> KeyConfig:
        s = st.settings
        return KeyConfig(
            max_expiration_days=s.max_expiration.total_seconds() / 86400,
            default_expiration=keys.format_duration(s.effective_default_expiration),
            ephemeral_max_expiration=keys.format_duration(s.ephemeral_max_expiration),
        )

    @app.post(
        "/v1/api-keys",
        response_model=MintResponse,
        status_code=201,
        tags=["api-keys"],
        responses=ERROR_RESPONSES,
    )
    async def mint_key(body: MintRequest, st: StateDep, caller: TokenCaller) -> MintResponse:
        subs = await _subscriptions(st)
        try:
            rec, plaintext = await st.keys().mint(
                caller,
                MintInput(
                    body.name,
                    body.description,
                    body.subscription,
                    body.expires_in,
                    body.ephemeral,
                    body.labels,
                ),
                subs,
            )
        except ApiError as exc:
            st.metrics.mints.labels(exc.code).inc()
            raise
        st.metrics.mints.labels("success").inc()
        return MintResponse(
            key=plaintext,
            key_prefix=keys.display_prefix(rec.id),
            id=rec.id,
            name=rec.name,
            subscription=rec.subscription,
            created_at=rec.created_at,
            expires_at=rec.expires_at,
            ephemeral=rec.ephemeral,
            labels=rec.labels,
        )

    @app.get("/v1/api-keys", response_model=KeyList, tags=["api-keys"], responses=ERROR_RESPONSES)
    async def list_keys(
        st: StateDep,
        caller: TokenCaller,
        status: Annotated[list[KeyStatus] | None, Query()] = None,
        include_ephemeral: Annotated[bool, Query(alias="includeEphemeral")] = False,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
        offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    ) -> KeyList:
        recs, more = await st.keys().search(
            SearchQuery(
                owner=caller.username,
                statuses=tuple(status or ()),
                include_ephemeral=include_ephemeral,
                limit=limit,
                offset=offset,
            )
        )
        return KeyList(data=[_view(r, st) for r in recs], has_more=more)

    @app.post("/v1/api-keys/search", response_model=KeyList, tags=["api-keys"], responses=ERROR_RESPONSES)
    async def search_keys(body: SearchRequest, st: StateDep, caller: TokenCaller) -> KeyList:
        f = body.filters
        owner: str | None = caller.username
        if f.username is not None and f.username != caller.username:
            if not await _is_admin(st, caller):
                raise ApiError(403, "forbidden", "only admins can search other users' keys")
            owner = f.username
        elif f.username is None and await _is_admin(st, caller):
            owner = None  # admins search across all users unless they narrow by username
        sub = _split_subscription(f.subscription, st.settings.subscription_namespace) if f.subscription else None
        recs, more = await st.keys().search(
            SearchQuery(
                owner=owner,
                statuses=tuple(dict.fromkeys(f.status)),
                subscription=sub,
                name_contains=f.name_contains,
                description_contains=f.description_contains,
                labels=f.labels,
                include_ephemeral=f.include_ephemeral,
                created_after=f.created_after,
                created_before=f.created_before,
                sort=body.sort.by,
                descending=body.sort.order == "desc",
                limit=body.pagination.limit,
                offset=body.pagination.offset,
            )
        )
        return KeyList(data=[_view(r, st) for r in recs], has_more=more)

    @app.post(
        "/v1/api-keys/bulk-revoke",
        response_model=BulkRevokeResponse,
        tags=["api-keys"],
        responses=ERROR_RESPONSES,
    )
    async def bulk_revoke(body: BulkRevokeRequest, st: StateDep, caller: TokenCaller) -> BulkRevokeResponse:
        username = body.username
        if body.subscription is not None or (username is not None and username != caller.username):
            if not await _is_admin(st, caller):
                raise ApiError(403, "forbidden", "only admins can revoke other users' or a subscription's keys")
        elif username is None:
            username = caller.username
        sub = _split_subscription(body.subscription, st.settings.subscription_namespace) if body.subscription else None
        ids = await st.keys().store.revoke_many(
            owner=username,
            subscription=sub,
            actor=caller.username,
            reason=body.reason or "bulk revoke",
            now=st.keys().clock(),
            dry_run=body.dry_run,
        )
        if not body.dry_run:
            st.metrics.revocations.labels("bulk").inc(len(ids))
        verb = "would be revoked" if body.dry_run else "revoked"
        return BulkRevokeResponse(
            revoked_count=len(ids), key_ids=ids, dry_run=body.dry_run, message=f"{len(ids)} API key(s) {verb}"
        )

    @app.get("/v1/api-keys/{key_id}", response_model=KeyView, tags=["api-keys"], responses=ERROR_RESPONSES)
    async def get_key(key_id: Annotated[str, Path(max_length=64)], st: StateDep, caller: TokenCaller) -> KeyView:
        admin = await _is_admin(st, caller)
        return _view(await st.keys().get_visible(caller, key_id, admin), st)

    @app.delete("/v1/api-keys/{key_id}", response_model=KeyView, tags=["api-keys"], responses=ERROR_RESPONSES)
    async def revoke_key(
        key_id: Annotated[str, Path(max_length=64)],
        st: StateDep,
        caller: TokenCaller,
        reason: Annotated[str | None, Query(max_length=1024)] = None,
    ) -> KeyView:
        admin = await _is_admin(st, caller)
        rec = await st.keys().revoke(caller, key_id, admin, reason)
        st.metrics.revocations.labels("single").inc()
        return _view(rec, st)

    @app.get(
        "/v1/subscriptions",
        response_model=SubscriptionList,
        tags=["subscriptions"],
        responses=ERROR_RESPONSES,
    )
    async def list_subscriptions(st: StateDep, caller: Caller) -> SubscriptionList:
        subs = await _subscriptions(st)
        if caller.via == "api_key":
            bound = find(subs, caller.key_subscription or "", st.settings.subscription_namespace)
            visible = [bound] if bound is not None else []
        else:
            visible = [s for s in subs if s.owned_by(caller.username, caller.groups) and not s.deleting]
        return SubscriptionList(data=[_sub_view(s) for s in rank(visible)])

    @app.post(
        "/internal/v1/api-keys/validate",
        response_model=ValidateResponse,
        tags=["gateway"],
        responses=ERROR_RESPONSES,
    )
    async def validate_key(body: ValidateRequest, st: StateDep) -> Response:
        """Served by `fastpath.ValidateFastPath` at runtime; this route defines the OpenAPI contract."""
        return JSONResponse(await _validate_payload(st, body.key))

    @app.post(
        "/internal/v1/subscriptions/select",
        response_model=SelectResponse,
        response_model_exclude_none=True,
        tags=["gateway"],
        responses=ERROR_RESPONSES,
    )
    async def select_subscription(body: SelectRequest, st: StateDep) -> SelectResponse:
        """Always 200 for a well-formed request; the outcome (or a stable error code) is in the body."""
        try:
            subs = await _subscriptions(st)
        except ApiError as exc:
            return SelectResponse(selected=False, error="internal_error", message=exc.message)
        try:
            sub = select_for_request(
                subs,
                body.username,
                body.groups,
                requested=body.requested_subscription,
                bound=body.key_subscription,
                model=body.model,
                default_namespace=st.settings.subscription_namespace,
            )
        except SelectionError as exc:
            return SelectResponse(selected=False, error=exc.code, message=exc.message)
        return SelectResponse(selected=True, name=sub.name, namespace=sub.namespace, subscription=_sub_view(sub))

    @app.delete(
        "/internal/v1/subscriptions/{namespace}/{name}/api-keys",
        response_model=SubscriptionRevokeResponse,
        tags=["gateway"],
        responses=ERROR_RESPONSES,
    )
    async def revoke_subscription_keys(
        namespace: Annotated[str, Path(max_length=63)],
        name: Annotated[str, Path(max_length=253)],
        st: StateDep,
        caller: TokenCaller,
    ) -> SubscriptionRevokeResponse:
        """Used by the subscription deletion cleanup Job: revokes only this subscription's keys."""
        if not await _is_admin(st, caller, namespace):
            raise ApiError(403, "forbidden", "only subscription admins can revoke a subscription's keys")
        ids = await st.keys().store.revoke_many(
            owner=None,
            subscription=(namespace, name),
            actor=caller.username,
            reason="subscription deleted",
            now=st.keys().clock(),
            dry_run=False,
            action="subscription_revoked",
        )
        st.metrics.revocations.labels("subscription").inc(len(ids))
        return SubscriptionRevokeResponse(subscription=f"{namespace}/{name}", revoked_count=len(ids))

    @app.post(
        "/internal/v1/api-keys/cleanup",
        response_model=CleanupResponse,
        tags=["gateway"],
        responses=ERROR_RESPONSES,
    )
    async def cleanup(st: StateDep, caller: TokenCaller) -> CleanupResponse:
        """Hard-deletes keys revoked or expired longer ago than the retention period (admin only)."""
        if not await _is_admin(st, caller):
            raise ApiError(403, "forbidden", "only admins can purge old API keys")
        cutoff = st.keys().clock() - st.settings.revoked_retention
        return CleanupResponse(purged_count=await st.keys().store.purge(cutoff), cutoff=cutoff)

    @app.get("/v1/models", response_model=ModelList, tags=["models"], responses=ERROR_RESPONSES)
    async def list_models(
        request: Request,
        response: Response,
        st: StateDep,
        caller: Caller,
        x_maas_subscription: Annotated[str | None, Header(max_length=317)] = None,
    ) -> ModelList:
        """Models the caller can use, checked by probing each with the caller's own credentials."""
        response.headers["Cache-Control"] = "no-store"
        if st.models is None or st.probe_http is None:
            raise ApiError(503, "models_unavailable", "the model catalogue is not configured")
        subs = await _subscriptions(st)
        default_ns = st.settings.subscription_namespace
        if caller.via == "api_key":
            bound = find(subs, caller.key_subscription or "", default_ns)
            if x_maas_subscription and find(subs, x_maas_subscription, default_ns) != bound:
                raise ApiError(403, "access_denied", "the API key is bound to a different subscription")
            chosen = [bound] if bound is not None and bound.usable else []
        elif x_maas_subscription:
            wanted = find(subs, x_maas_subscription, default_ns)
            if wanted is None or not wanted.owned_by(caller.username, caller.groups):
                raise ApiError(404, "subscription_not_found", "subscription not found or not accessible")
            chosen = [wanted] if wanted.usable else []
        else:
            chosen = [s for s in subs if s.owned_by(caller.username, caller.groups) and s.usable]
        serving: dict[str, list[str]] = {}
        for sub in rank(chosen):
            for ref in sub.model_refs:
                serving.setdefault(ref.ref, []).append(sub.ref)
        try:
            all_models = await st.models.list_models()
        except Exception as exc:
            raise ApiError(503, "models_unavailable", "models cannot be read right now") from exc
        candidates = [m for m in all_models if m.ref in serving and m.ready]
        headers = {"Authorization": request.headers.get("authorization", "")}
        if x_maas_subscription:
            headers["X-MaaS-Subscription"] = x_maas_subscription
        allowed = await accessible(
            st.probe_http,
            candidates,
            headers,
            per_probe=st.settings.model_probe_timeout,
            deadline=st.settings.models_deadline,
        )
        return ModelList(
            data=[
                ModelView(
                    id=m.model_id,
                    created=m.created,
                    owned_by=m.ref,
                    kind=m.kind,
                    url=m.endpoint,
                    ready=True,
                    subscriptions=serving[m.ref],
                )
                for m in allowed
            ]
        )

    @app.get("/metrics", include_in_schema=False)
    async def metrics(st: StateDep) -> Response:
        if not st.settings.metrics_enabled:
            return JSONResponse(error_body("not_found", "metrics disabled"), status_code=404)
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    settings: MaasApiSettings,
    subscription_source: SubscriptionSource,
    authenticator: Authenticator,
    *,
    store: KeyStore | None = None,
    metrics: ApiMetrics | None = None,
    model_source: ModelSource | None = None,
    probe_client: httpx.AsyncClient | None = None,
) -> FastAPI:
    """Build the app. Without `store`, the lifespan opens `settings.database_url` and runs migrations."""
    state = AppState(settings, subscription_source, authenticator, metrics or ApiMetrics(), models=model_source)

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
        state.service = KeyService(st, settings)
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
    app.state.maasapi = state
    install_error_handlers(app)
    _register_routes(app)
    usage_api.install(app, usage_api.UsageDeps(caller=_caller, is_admin=_is_admin, subscriptions=_subscriptions))
    validate_route = next(r for r in app.routes if getattr(r, "path", None) == VALIDATE_PATH)
    app.add_middleware(ValidateFastPath, handler=lambda key: _validate_payload(state, key), route=validate_route)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware, metrics=state.metrics)
    return app
