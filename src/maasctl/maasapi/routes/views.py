"""Response shapes built from the stored key records and the contract's subscription views."""

from __future__ import annotations

from maasctl.contract.views import SubscriptionView
from maasctl.maasapi import keys
from maasctl.maasapi.deps import AppState
from maasctl.maasapi.schemas import KeyView, ModelRefView, TokenRateLimitView
from maasctl.maasapi.schemas import SubscriptionView as SubscriptionOut
from maasctl.maasapi.store import KeyRecord


def key_view(rec: KeyRecord, st: AppState) -> KeyView:
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


def subscription_out(sub: SubscriptionView) -> SubscriptionOut:
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
