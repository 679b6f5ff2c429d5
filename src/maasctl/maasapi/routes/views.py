"""Response shapes built from the stored key records and the contract's subscription views."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from maasctl.contract.billing_terms import BillingTerms
from maasctl.contract.selection import format_ref
from maasctl.contract.views import ModelRefView as PublishedModel
from maasctl.contract.views import SubscriptionView
from maasctl.maasapi import keys
from maasctl.maasapi.deps import AppState
from maasctl.maasapi.schemas import (
    BillingRateItem,
    BillingTermsItem,
    KeyView,
    ModelRefItem,
    ModelRefView,
    PlanLimitItem,
    RateLimitItem,
    SubscriptionInfo,
    SubscriptionListItem,
    TokenRateLimitView,
)
from maasctl.maasapi.schemas import SubscriptionView as SubscriptionOut
from maasctl.maasapi.store import KeyRecord


def key_subscription(rec: KeyRecord, st: AppState) -> str:
    """The key's subscription as the reference names it (bare name in the subscription namespace)."""
    return format_ref(rec.subscription_namespace, rec.subscription_name, st.settings.subscription_namespace)


def key_view(rec: KeyRecord, st: AppState) -> KeyView:
    return KeyView(
        id=rec.id,
        key_prefix=keys.display_prefix(rec.id),
        name=rec.name,
        description=rec.description,
        username=rec.owner,
        groups=list(rec.groups),
        subscription=key_subscription(rec, st),
        status=rec.status(st.keys().clock()),
        ephemeral=rec.ephemeral,
        labels=rec.labels,
        creation_date=rec.created_at,
        expiration_date=rec.expires_at,
        last_used_at=rec.last_used_at,
        revoked_at=rec.revoked_at,
        revoked_by=rec.revoked_by,
        revoke_reason=rec.revoke_reason,
    )


def subscription_out(sub: SubscriptionView) -> SubscriptionOut:
    """The internal shape (select callback)."""
    return SubscriptionOut(
        id=sub.key,
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
                token_rate_limits=[TokenRateLimitView(limit=t.limit, window=t.window) for t in m.tiers],
            )
            for m in sub.models
        ],
        organization_id=sub.organization_id,
        cost_center=sub.cost_center,
        labels=sub.label_map,
    )


_SOURCES: Final = {"ExternalModel": "external", "LLMInferenceService": "internal"}


def billing_item(terms: BillingTerms) -> BillingTermsItem:
    return BillingTermsItem(
        organization_id=terms.organization_id, tenant=terms.tenant, tenant_namespace=terms.tenant_namespace,
        state=terms.state, enforced=terms.enforced, billing_mode=terms.billing_mode, plan=terms.plan,
        plan_found=terms.plan_found, limits=[PlanLimitItem(kind=limit.kind, limit=limit.limit, window=limit.window,
                                                           name=limit.name) for limit in terms.limits],
        model_scopes=list(terms.model_scopes), route=terms.route)


def subscription_item(sub: SubscriptionView, default_namespace: str,
                      models: Mapping[str, PublishedModel] | None = None,
                      billing: tuple[BillingTerms, ...] | None = None) -> SubscriptionListItem:
    """The reference's `SubscriptionListItem` (plus maasctl's `namespace`, `phase`, `unlimited` and `billing`);
    each model entry carries what the reference reads of its MaaSModelRef (`models`, by `namespace/name`) when
    known."""
    known = models or {}
    return SubscriptionListItem(
        subscription_id_header=format_ref(sub.namespace, sub.name, default_namespace),
        subscription_description=sub.description or sub.display_name or sub.name,
        display_name=sub.display_name,
        priority=sub.priority,
        model_refs=[
            ModelRefItem(
                name=m.name,
                namespace=m.namespace,
                model_name=(ref.model_id or None) if (ref := known.get(m.key)) is not None else None,
                display_name=ref.display_name if ref is not None else None,
                description=ref.description if ref is not None else None,
                source=_SOURCES.get(ref.kind) if ref is not None else None,
                token_rate_limits=[RateLimitItem(limit=t.limit, window=t.window) for t in m.tiers],
                unlimited=m.unlimited,
                billing_rate=BillingRateItem(per_token=m.billing_per_token) if m.billing_per_token else None,
            )
            for m in sub.models
        ],
        organization_id=sub.organization_id,
        cost_center=sub.cost_center,
        labels=sub.label_map,
        namespace=sub.namespace,
        phase=sub.phase or "Pending",
        billing=[billing_item(t) for t in billing] if billing is not None else None,
    )


def subscription_info(sub: SubscriptionView, default_namespace: str) -> SubscriptionInfo:
    """A subscription as `/v1/models` lists it under a model."""
    return SubscriptionInfo(name=format_ref(sub.namespace, sub.name, default_namespace),
                            display_name=sub.display_name, description=sub.description)
