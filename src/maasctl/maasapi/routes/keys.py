"""`/v1/api-keys`: mint, list, search, read and revoke keys (user tokens only).

Who sees which keys (`deps.access_of`): everyone their own; a platform administrator all; an organization
administrator also the keys of their organizations' subscriptions (`store.KeyScope`) - searching, reading or
revoking anything else answers as if it did not exist (404, an empty page) or 403 for a named subscription.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from maasctl.contract.selection import parse_ref
from maasctl.maasapi import keys
from maasctl.maasapi.deps import KEY_ERROR_RESPONSES, StateDep, TokenCaller, access_of, subscriptions_of
from maasctl.maasapi.errors import ApiError, error_body
from maasctl.maasapi.routes.views import key_subscription, key_view
from maasctl.maasapi.schemas import (
    BulkRevokeRequest,
    BulkRevokeResponse,
    KeyConfig,
    KeyList,
    KeyStatus,
    KeyView,
    MintRequest,
    MintResponse,
    SearchRequest,
)
from maasctl.maasapi.service import MintInput
from maasctl.maasapi.store import SearchQuery

router = APIRouter(tags=["api-keys"], responses=KEY_ERROR_RESPONSES)


@router.get("/v1/api-keys/config", response_model=KeyConfig)
async def key_config(st: StateDep, _: TokenCaller) -> KeyConfig:
    s = st.settings
    return KeyConfig(
        max_expiration_days=days if (days := s.max_expiration.total_seconds() / 86400) % 1 else int(days),
        default_expiration=keys.format_duration(s.effective_default_expiration),
        ephemeral_max_expiration=keys.format_duration(s.ephemeral_max_expiration),
    )


_MINT_LIMITED: dict[int | str, dict[str, Any]] = {429: {
    "description": "The caller holds the maximum of active keys (`too_many_keys`) or minted too many in the last "
                   "minute (`key_mint_rate_limited`); `Retry-After` says when a mint can succeed",
    "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
    "content": {"application/json": {"example": error_body("too_many_keys", "message", status=429)}},
}}


@router.post("/v1/api-keys", response_model=MintResponse, status_code=201, responses=_MINT_LIMITED)
async def mint_key(body: MintRequest, st: StateDep, caller: TokenCaller) -> MintResponse:
    subs = await subscriptions_of(st)
    try:
        rec, plaintext = await st.keys().mint(
            caller,
            MintInput(body.name, body.description, body.subscription, body.expires_in, body.ephemeral, body.labels),
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
        subscription=key_subscription(rec, st),
        created_at=rec.created_at,
        expires_at=rec.expires_at,
        ephemeral=rec.ephemeral,
        labels=rec.labels,
    )


@router.get("/v1/api-keys", response_model=KeyList, response_model_exclude_none=True)
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
    return KeyList(data=[key_view(r, st) for r in recs], has_more=more)


@router.post("/v1/api-keys/search", response_model=KeyList, response_model_exclude_none=True)
async def search_keys(body: SearchRequest, st: StateDep, caller: TokenCaller) -> KeyList:
    f = body.filters
    owner: str | None = caller.username
    scope = None
    if f.username is not None and f.username != caller.username:
        access = await access_of(st, caller)
        if not access.administers:
            raise ApiError(403, "forbidden", "only admins can search other users' keys")
        owner, scope = f.username, access.key_scope(own=False)
    elif f.username is None:
        access = await access_of(st, caller)
        if access.administers:  # admins search across all users (of their organizations) unless they narrow
            owner, scope = None, access.key_scope(own=True)
    sub = parse_ref(f.subscription, st.settings.subscription_namespace) if f.subscription else None
    recs, more = await st.keys().search(
        SearchQuery(
            owner=owner,
            scope=scope,
            statuses=tuple(dict.fromkeys(f.status or ("active",))),  # the reference: active keys unless asked
            subscription=sub,
            name_contains=f.name_contains,
            description_contains=f.description_contains,
            labels=f.label_filter,
            include_ephemeral=f.include_ephemeral,
            created_after=f.created_after,
            created_before=f.created_before,
            sort=body.sort.by,
            descending=body.sort.order == "desc",
            limit=body.pagination.limit,
            offset=body.pagination.offset,
        )
    )
    return KeyList(data=[key_view(r, st) for r in recs], has_more=more)


@router.post("/v1/api-keys/bulk-revoke", response_model=BulkRevokeResponse)
async def bulk_revoke(body: BulkRevokeRequest, st: StateDep, caller: TokenCaller) -> BulkRevokeResponse:
    """Revoke every active key of a user, of a subscription (admins), or both. An empty filter is refused
    (400): it never means "all of my keys"; revoking your own keys names your username, as in the reference."""
    if body.username is None and body.subscription is None:
        raise ApiError(400, "invalid_request", "bulk revoke needs a username, a subscription or both")
    username = body.username
    others = body.subscription is not None or (username is not None and username != caller.username)
    sub = parse_ref(body.subscription, st.settings.subscription_namespace) if body.subscription else None
    scope = None
    if others:
        access = await access_of(st, caller)
        if not access.administers:
            raise ApiError(403, "forbidden", "only admins can revoke other users' or a subscription's keys")
        if sub is not None and not access.allows_subscription(*sub):
            raise ApiError(403, "forbidden", "that subscription is not one of your organizations'")
        scope = access.key_scope(own=False)  # an organization admin: their organizations' keys only
    ids = await st.keys().store.revoke_many(
        scope=scope,
        owner=username,
        subscription=sub,
        actor=caller.username,
        reason=body.reason or "bulk revoke",
        now=st.keys().clock(),
        dry_run=body.dry_run,
    )
    if not body.dry_run:
        st.metrics.revocations.labels("bulk").inc(len(ids))
    described = " and".join(part for part in (
        f" of user {username}" if username is not None else "",
        f" bound to subscription {body.subscription}" if body.subscription is not None else "",
    ) if part)
    message = (f"dry run: {len(ids)} active API key(s){described} would be revoked" if body.dry_run
               else f"{len(ids)} active API key(s){described} revoked")
    return BulkRevokeResponse(revoked_count=len(ids), dry_run=body.dry_run, message=message)


@router.get("/v1/api-keys/{key_id}", response_model=KeyView, response_model_exclude_none=True)
async def get_key(key_id: Annotated[str, Path(max_length=64)], st: StateDep, caller: TokenCaller) -> KeyView:
    scope = (await access_of(st, caller)).key_scope()
    return key_view(await st.keys().get_visible(caller, key_id, scope), st)


@router.delete("/v1/api-keys/{key_id}", response_model=KeyView, response_model_exclude_none=True)
async def revoke_key(
    key_id: Annotated[str, Path(max_length=64)],
    st: StateDep,
    caller: TokenCaller,
    reason: Annotated[str | None, Query(max_length=1024)] = None,
) -> KeyView:
    scope = (await access_of(st, caller)).key_scope()
    rec = await st.keys().revoke(caller, key_id, scope, reason)
    st.metrics.revocations.labels("single").inc()
    return key_view(rec, st)
