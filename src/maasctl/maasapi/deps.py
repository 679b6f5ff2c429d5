"""What every maas-api route depends on: the app state, the caller's identity and the admin check.

Identity: `Authorization: Bearer <token>` is an API key (validated against the store) or a Kubernetes token
(TokenReview through the `Authenticator`); an API key may also come in `x-api-key` (`contract.edge.
presented_credential`, the gateway's rule too). Key management needs a user token (`TokenCaller`): an API key
cannot mint, list or revoke keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from fastapi import Depends, Header, Request

from maasctl.contract.edge import ConflictingCredentials, presented_credential
from maasctl.contract.views import SubscriptionView
from maasctl.maasapi import keys
from maasctl.maasapi.auth import Authenticator, Identity
from maasctl.maasapi.errors import ApiError, error_body
from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.service import KeyService
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import ModelSource, SubscriptionSource
from maasctl.maasapi.store import KeyStore

__all__ = [
    "ERROR_RESPONSES",
    "AppState",
    "Caller",
    "StateDep",
    "TokenCaller",
    "caller_identity",
    "is_admin",
    "subscriptions_of",
]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    s: {"description": d, "content": {"application/json": {"example": error_body("code", "message", status=s)}}}
    for s, d in (
        (400, "Bad request: invalid JSON or a schema violation"),
        (401, "Unauthenticated"),
        (403, "Forbidden"),
        (404, "Not found"),
        (413, "Body too large"),
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


async def caller_identity(
    request: Request,
    st: StateDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header(description="A MaaS API key, instead of Authorization")] = None,
) -> Identity:
    try:
        token = presented_credential(authorization, x_api_key)
    except ConflictingCredentials as exc:
        raise ApiError(401, "conflicting_credentials", str(exc)) from None
    if not token:
        raise ApiError(401, "unauthenticated", "missing bearer token or x-api-key", None)
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
        await st.keys().refresh_groups(identity)
    request.state.maasapi_user = identity.username
    return identity


Caller = Annotated[Identity, Depends(caller_identity)]


async def _token_caller(caller: Caller) -> Identity:
    if caller.via == "api_key":
        raise ApiError(403, "api_key_not_allowed", "API keys cannot manage API keys; use your user token")
    return caller


TokenCaller = Annotated[Identity, Depends(_token_caller)]


async def is_admin(st: AppState, caller: Identity, namespace: str | None = None) -> bool:
    try:
        return await st.authenticator.is_admin(caller, namespace or st.settings.subscription_namespace)
    except Exception as exc:
        raise ApiError(503, "auth_unavailable", "access review is unavailable") from exc


async def subscriptions_of(st: AppState) -> Sequence[SubscriptionView]:
    try:
        return await st.subscriptions.list_subscriptions()
    except Exception as exc:
        raise ApiError(503, "subscriptions_unavailable", "subscriptions cannot be read right now") from exc
