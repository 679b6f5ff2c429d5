"""`/v1/subscriptions` and `/v1/model/{model-id}/subscriptions`: the subscriptions a caller may use, as a bare
JSON array of the reference's `SubscriptionListItem`. As in the reference, an API key lists every subscription of
its user (the key's owner and the groups it was validated with), not only the one it is bound to: the key still
only ever uses its binding (`contract.selection`); each model entry carries its published name, display name,
description and source from the MaaSModelRef. Also as in the reference, a subscription lists only the models a
MaaSAuthPolicy grants the caller (the gateway refuses the others: listing them would advertise a 403), and a
subscription left with none is omitted.

maasctl adds `billing` to each: the billing Plan limits and tenant state of the subscription's organization on
its Gateway (`contract.billing_terms`), so a subscriber sees every limit they are under. Only their own
subscriptions' organizations are ever looked up, and nothing of a wallet but its state is answered."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Path

from maasctl.contract.billing_terms import BillingTerms, terms_for
from maasctl.contract.selection import rank
from maasctl.contract.views import AuthPolicyView, ModelRefView, SubscriptionView
from maasctl.maasapi.auth import Identity
from maasctl.maasapi.deps import ERROR_RESPONSES, AppState, Caller, StateDep, auth_policies_of, subscriptions_of
from maasctl.maasapi.routes.views import subscription_item
from maasctl.maasapi.schemas import SubscriptionListItem

router = APIRouter(tags=["subscriptions"], responses=ERROR_RESPONSES)


async def visible_subscriptions(st: AppState, caller: Identity) -> Sequence[SubscriptionView]:
    """What the caller may see: every subscription that entitles the user (a key's owner and groups too), with
    only the models a MaaSAuthPolicy grants them (`granted`); one left with no model is not listed."""
    subs = rank(s for s in await subscriptions_of(st) if s.entitles(caller.username, caller.groups) and not s.deleting)
    if st.grants is None:
        return subs
    allowed = granted(await auth_policies_of(st.grants), caller)
    narrowed = (replace(s, models=tuple(m for m in s.models if m.key in allowed)) for s in subs)
    return [s for s in narrowed if s.models]


def granted(policies: Iterable[AuthPolicyView], caller: Identity) -> frozenset[str]:
    """`namespace/name` of every model a usable MaaSAuthPolicy opens to the caller (the AuthPolicy builder's
    subject rule, `contract.views.entitled`)."""
    return frozenset(m for p in policies if p.grants and p.entitles(caller.username, caller.groups) for m in p.models)


async def _models_by_key(st: AppState) -> dict[str, ModelRefView]:
    """The MaaSModelRefs by `namespace/name`, for the entries' names and descriptions; none while they cannot be
    read (the listing itself does not depend on them)."""
    if st.models is None:
        return {}
    try:
        return {m.key: m for m in await st.models.list_models()}
    except TimeoutError:  # the model cache not synced yet: only the optional fields are left out
        return {}


def billing_of(st: AppState) -> Callable[[SubscriptionView], tuple[BillingTerms, ...] | None]:
    """Each subscription's billing terms (None for all while the billing kinds are not known)."""
    objects = st.billing.billing_objects() if st.billing is not None else None
    if objects is None:
        return lambda _sub: None
    tenants, plans = objects
    return lambda sub: terms_for(sub.organization_id, sub.tenant_gateway(st.settings.default_gateway), tenants,
                                 plans)


def _items(st: AppState, visible: Sequence[SubscriptionView],
           models: dict[str, ModelRefView]) -> list[SubscriptionListItem]:
    billing = billing_of(st)
    default_ns = st.settings.subscription_namespace
    return [subscription_item(s, default_ns, models, billing(s)) for s in visible]


@router.get("/v1/subscriptions", response_model=list[SubscriptionListItem], response_model_exclude_none=True)
async def list_subscriptions(st: StateDep, caller: Caller) -> list[SubscriptionListItem]:
    visible = await visible_subscriptions(st, caller)
    return _items(st, visible, await _models_by_key(st) if visible else {})


@router.get("/v1/model/{model_id}/subscriptions", response_model=list[SubscriptionListItem],
            response_model_exclude_none=True)
async def list_model_subscriptions(
    model_id: Annotated[str, Path(min_length=1, max_length=253, description="The MaaSModelRef name")],
    st: StateDep,
    caller: Caller,
) -> list[SubscriptionListItem]:
    """The caller's subscriptions that include a model: `model_id` is the MaaSModelRef name (in any
    namespace), not the served model name. Useful to choose X-MaaS-Subscription. Unknown models: `[]`."""
    visible = [s for s in await visible_subscriptions(st, caller) if any(m.name == model_id for m in s.models)]
    return _items(st, visible, await _models_by_key(st) if visible else {})
