"""`/v1/subscriptions` and `/v1/model/{model-id}/subscriptions`: the subscriptions a caller may use (an API
key sees only the one it is bound to), as a bare JSON array of the reference's `SubscriptionListItem`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Path

from maasctl.contract.selection import find, rank
from maasctl.contract.views import SubscriptionView
from maasctl.maasapi.auth import Identity
from maasctl.maasapi.deps import ERROR_RESPONSES, AppState, Caller, StateDep, subscriptions_of
from maasctl.maasapi.routes.views import subscription_item
from maasctl.maasapi.schemas import SubscriptionListItem

router = APIRouter(tags=["subscriptions"], responses=ERROR_RESPONSES)


async def visible_subscriptions(st: AppState, caller: Identity) -> Sequence[SubscriptionView]:
    """What the caller may see: an API key its bound subscription, a user every one that entitles them."""
    subs = await subscriptions_of(st)
    if caller.via == "api_key":
        bound = find(subs, caller.key_subscription or "", st.settings.subscription_namespace)
        return [bound] if bound is not None else []
    return rank(s for s in subs if s.entitles(caller.username, caller.groups) and not s.deleting)


@router.get("/v1/subscriptions", response_model=list[SubscriptionListItem], response_model_exclude_none=True)
async def list_subscriptions(st: StateDep, caller: Caller) -> list[SubscriptionListItem]:
    default_ns = st.settings.subscription_namespace
    return [subscription_item(s, default_ns) for s in await visible_subscriptions(st, caller)]


@router.get("/v1/model/{model_id}/subscriptions", response_model=list[SubscriptionListItem],
            response_model_exclude_none=True)
async def list_model_subscriptions(
    model_id: Annotated[str, Path(min_length=1, max_length=253, description="The MaaSModelRef name")],
    st: StateDep,
    caller: Caller,
) -> list[SubscriptionListItem]:
    """The caller's subscriptions that include a model: `model_id` is the MaaSModelRef name (in any
    namespace), not the served model name. Useful to choose X-MaaS-Subscription. Unknown models: `[]`."""
    default_ns = st.settings.subscription_namespace
    return [
        subscription_item(s, default_ns) for s in await visible_subscriptions(st, caller)
        if any(m.name == model_id for m in s.models)
    ]
