"""What every maas-api route depends on: the app state, the caller's identity and the admin check.

Identity: `Authorization: Bearer <token>` is an API key (validated against the store) or a Kubernetes token
(TokenReview through the `Authenticator`); an API key may also come in `x-api-key` (`contract.edge.
presented_credential`, the gateway's rule too). Key management needs a user token (`TokenCaller`): an API key
cannot mint, list or revoke keys.

Administration (`access_of`): a platform administrator (SubjectAccessReview, `Authenticator.is_admin`) may do
everything; an organization administrator (a group the organization-admin mapping names,
`contract.organizations`) administers the keys and usage of their organizations only; everyone else only
their own. Only user tokens administer anything: an API key is never an administrator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

import httpx
from fastapi import Depends, Header, Request

from maasctl.contract.edge import ConflictingCredentials, presented_credential
from maasctl.contract.organizations import OrganizationAdmins
from maasctl.contract.views import AuthPolicyView, SubscriptionView
from maasctl.maasapi import keys
from maasctl.maasapi.auth import Authenticator, Identity
from maasctl.maasapi.errors import KEYS_PATH, ApiError, error_body
from maasctl.maasapi.keycache import KeyCacheListener
from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.service import KeyService
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import (
    BillingSource,
    GrantSource,
    ModelSource,
    OrganizationSource,
    SubscriptionSource,
)
from maasctl.maasapi.store import KeyScope, KeyStore

__all__ = [
    "ERROR_RESPONSES",
    "KEY_ERROR_RESPONSES",
    "Access",
    "AppState",
    "Caller",
    "StateDep",
    "TokenCaller",
    "access_of",
    "caller_identity",
    "is_admin",
    "subscriptions_of",
]

def _error_responses(path: str = "") -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a router, in the envelope its paths answer (`errors.error_body`)."""
    return {
        s: {"description": d, "content": {"application/json": {"example": error_body("code", "message", status=s,
                                                                                     path=path)}}}
        for s, d in (
            (400, "Bad request: invalid JSON or a schema violation"),
            (401, "Unauthenticated"),
            (403, "Forbidden"),
            (404, "Not found"),
            (413, "Body too large"),
        )
    }


ERROR_RESPONSES: Final = _error_responses()
KEY_ERROR_RESPONSES: Final = _error_responses(KEYS_PATH)


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
    organizations: OrganizationSource | None = None  # None: no delegated administration
    grants: GrantSource | None = None  # the MaaSAuthPolicies; None (embedded, tests): listings not narrowed by them
    billing: BillingSource | None = None  # TenantAccounts and Plans; None: listings carry no billing terms
    key_cache_listener: KeyCacheListener | None = None  # PostgreSQL: keeps the validation key cache live

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


async def auth_policies_of(grants: GrantSource) -> Sequence[AuthPolicyView]:
    """The MaaSAuthPolicies; 503 while they cannot be read (a listing never guesses what is granted)."""
    try:
        return await grants.list_auth_policies()
    except Exception as exc:
        raise ApiError(503, "subscriptions_unavailable", "access policies cannot be read right now") from exc


@dataclass(frozen=True)
class Access:
    """What a caller administers: everything (`platform`), or the keys and usage of `organizations` (whose
    current subscriptions are `subscriptions`), or nothing beyond their own keys."""

    caller: str
    platform: bool = False
    organizations: frozenset[str] = frozenset()
    subscriptions: frozenset[tuple[str, str]] = frozenset()

    @property
    def delegated(self) -> bool:
        """An organization administrator (and not a platform administrator)."""
        return not self.platform and bool(self.organizations)

    @property
    def administers(self) -> bool:
        return self.platform or bool(self.organizations)

    def key_scope(self, *, own: bool = True) -> KeyScope | None:
        """The keys this caller may see and revoke (None: all of them); `own` adds the caller's own keys."""
        if self.platform:
            return None
        return KeyScope(self.caller if own else None, self.organizations, self.subscriptions)

    def allows_subscription(self, namespace: str, name: str) -> bool:
        return self.platform or (namespace, name) in self.subscriptions


async def organization_admins(st: AppState) -> OrganizationAdmins:
    if st.organizations is None:
        return OrganizationAdmins()
    try:
        return await st.organizations.organization_admins()
    except Exception as exc:
        raise ApiError(503, "organizations_unavailable", "the organization administrators cannot be read now") \
            from exc


async def access_of(st: AppState, caller: Identity) -> Access:
    """The caller's administrative reach (deny by default: API keys, unmapped groups and organizations that no
    subscription names administer nothing)."""
    if caller.via != "token":
        return Access(caller.username)
    if await is_admin(st, caller):
        return Access(caller.username, platform=True)
    orgs = (await organization_admins(st)).organizations_of(caller.groups)
    if not orgs:
        return Access(caller.username)
    subs = frozenset((s.namespace, s.name) for s in await subscriptions_of(st)
                     if s.organization is not None and s.organization in orgs)
    return Access(caller.username, organizations=orgs, subscriptions=subs)
