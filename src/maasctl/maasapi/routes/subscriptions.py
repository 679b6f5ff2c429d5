"""`/v1/subscriptions`: the subscriptions a caller may use (an API key sees only the one it is bound to)."""

from __future__ import annotations

from fastapi import APIRouter

from maasctl.contract.selection import find, rank
from maasctl.maasapi.deps import ERROR_RESPONSES, Caller, StateDep, subscriptions_of
from maasctl.maasapi.routes.views import subscription_out
from maasctl.maasapi.schemas import SubscriptionList

router = APIRouter(tags=["subscriptions"], responses=ERROR_RESPONSES)


@router.get("/v1/subscriptions", response_model=SubscriptionList)
async def list_subscriptions(st: StateDep, caller: Caller) -> SubscriptionList:
    subs = await subscriptions_of(st)
    if caller.via == "api_key":
        bound = find(subs, caller.key_subscription or "", st.settings.subscription_namespace)
        visible = [bound] if bound is not None else []
    else:
        visible = [s for s in subs if s.entitles(caller.username, caller.groups) and not s.deleting]
    return SubscriptionList(data=[subscription_out(s) for s in rank(visible)])
