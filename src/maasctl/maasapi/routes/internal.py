"""`/internal/v1/*`: the gateway's callbacks (key validation, subscription selection) and the cleanup
endpoints (a subscription's keys on deletion, purge of old keys)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path
from fastapi.responses import JSONResponse, Response

from maasctl.contract.selection import find, select_subscription
from maasctl.maasapi.deps import ERROR_RESPONSES, AppState, StateDep, TokenCaller, is_admin, subscriptions_of
from maasctl.maasapi.errors import ApiError
from maasctl.maasapi.fastpath import INVALID
from maasctl.maasapi.gatewayauth import gateway_token_valid
from maasctl.maasapi.routes.views import subscription_out
from maasctl.maasapi.schemas import (
    CleanupResponse,
    SelectRequest,
    SelectResponse,
    SubscriptionRevokeResponse,
    ValidateRequest,
    ValidateResponse,
)


async def _gateway(st: StateDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """Only the gateway (its shared token, `maasapi.gatewayauth`) may call the callbacks."""
    if not gateway_token_valid(authorization, st.settings.gateway_tokens):
        st.metrics.internal_unauthenticated.labels("select").inc()
        raise ApiError(401, "unauthenticated", "a valid gateway token is required")


GatewayCaller = Depends(_gateway)
router = APIRouter(tags=["gateway"], responses=ERROR_RESPONSES)


async def validate_payload(st: AppState, key: str) -> dict[str, Any]:
    """The validate answer for `key` (shared by the FastAPI route and the ASGI fast path)."""
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
        "labels": dict(rec.labels),  # set at mint; BudgetPolicy key selectors are enforced on them
    }


@router.post("/internal/v1/api-keys/validate", response_model=ValidateResponse, dependencies=[GatewayCaller])
async def validate_key(body: ValidateRequest, st: StateDep) -> Response:
    """Served by `fastpath.ValidateFastPath` at runtime; this route defines the OpenAPI contract."""
    return JSONResponse(await validate_payload(st, body.key))


@router.post("/internal/v1/subscriptions/select", response_model=SelectResponse,
             response_model_exclude_none=True, dependencies=[GatewayCaller])
async def select(body: SelectRequest, st: StateDep) -> SelectResponse:
    """Always 200 for a well-formed request; the outcome (or a stable error code) is in the body."""
    try:
        subs = await subscriptions_of(st)
    except ApiError as exc:
        return SelectResponse(selected=False, error="internal_error", message=exc.message)
    outcome = select_subscription(
        subs,
        body.username,
        body.groups,
        model=body.model or None,
        requested=body.requested_subscription,
        bound=body.key_subscription,
        default_namespace=st.settings.subscription_namespace,
        gateway=(body.gateway or "").strip() or st.settings.default_gateway,
        default_gateway=st.settings.default_gateway,
    )
    sub = outcome.subscription
    if sub is None:
        return SelectResponse(selected=False, error=str(outcome.code), message=outcome.message,
                              candidates=list(outcome.candidates) or None)
    return SelectResponse(selected=True, name=sub.name, namespace=sub.namespace,
                          organization_id=sub.organization_id, cost_center=sub.cost_center,
                          labels=sub.label_map, subscription=subscription_out(sub))


@router.delete("/internal/v1/subscriptions/{namespace}/{name}/api-keys", response_model=SubscriptionRevokeResponse)
async def revoke_subscription_keys(
    namespace: Annotated[str, Path(max_length=63)],
    name: Annotated[str, Path(max_length=253)],
    st: StateDep,
    caller: TokenCaller,
) -> SubscriptionRevokeResponse:
    """Used by the subscription deletion cleanup Job: revokes only this subscription's keys.

    Allowed for the cleanup Job's identity (`key_cleanup_users`) while the subscription is being deleted, and
    for subscription admins (manual cleanup). Nothing else can call it."""
    if caller.username in st.settings.key_cleanup_users:
        sub = find(await subscriptions_of(st), f"{namespace}/{name}", st.settings.subscription_namespace)
        if sub is None or not sub.deleting:
            raise ApiError(403, "forbidden", "the cleanup identity may only revoke keys of a subscription being "
                           "deleted")
    elif not await is_admin(st, caller, namespace):
        st.metrics.internal_unauthenticated.labels("revoke_subscription").inc()
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


@router.post("/internal/v1/api-keys/cleanup", response_model=CleanupResponse)
async def cleanup(st: StateDep, caller: TokenCaller) -> CleanupResponse:
    """Hard-deletes keys revoked or expired longer ago than the retention period (admin only)."""
    if not await is_admin(st, caller):
        raise ApiError(403, "forbidden", "only admins can purge old API keys")
    cutoff = st.keys().clock() - st.settings.revoked_retention
    return CleanupResponse(purged_count=await st.keys().store.purge(cutoff), cutoff=cutoff)
