"""Subscriptions as maas-api sees them, the `SubscriptionSource` protocol, and the pure selection rules.

Selection rules (shared by minting and the gateway's select callback):
- ownership: the caller's username is in `owner.users`, or one of its groups is in `owner.groups`;
  `*` in either list means any authenticated user.
- mint without a name: the highest `priority` owned, usable subscription; ties broken by the larger maximum
  token limit, then by `namespace/name` ascending (deterministic across replicas).
- request selection: explicit header, else the key's bound subscription, else the only owned subscription
  serving the model; several -> `multiple_subscriptions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ANY_USER = "*"
UNUSABLE_PHASES = frozenset({"Failed", "Invalid"})


@dataclass(frozen=True)
class TokenRateLimit:
    limit: int
    window: str


@dataclass(frozen=True)
class ModelRef:
    namespace: str
    name: str
    token_rate_limits: tuple[TokenRateLimit, ...] = ()
    billing_per_token: str | None = None
    unlimited: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


UNLIMITED = 2**63 - 1


@dataclass(frozen=True)
class Subscription:
    """The fields of a MaaSSubscription that maas-api needs."""

    namespace: str
    name: str
    owner_users: tuple[str, ...] = ()
    owner_groups: tuple[str, ...] = ()
    priority: int = 0
    phase: str = ""
    model_refs: tuple[ModelRef, ...] = ()
    deleting: bool = False
    display_name: str | None = None
    description: str | None = None
    organization_id: str | None = None
    cost_center: str | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def usable(self) -> bool:
        """Deleted or Failed/Invalid subscriptions cannot get new keys or requests."""
        return not self.deleting and self.phase not in UNUSABLE_PHASES

    @property
    def max_token_limit(self) -> int:
        if any(m.unlimited for m in self.model_refs):
            return UNLIMITED
        return max((t.limit for m in self.model_refs for t in m.token_rate_limits), default=0)

    def owned_by(self, username: str, groups: Iterable[str]) -> bool:
        if ANY_USER in self.owner_users or ANY_USER in self.owner_groups:
            return True
        if username in self.owner_users:
            return True
        return any(g in self.owner_groups for g in groups)

    def serves(self, model: str) -> bool:
        """`model` is `namespace/name` of a MaaSModelRef or a bare name."""
        if "/" in model:
            return any(m.ref == model for m in self.model_refs)
        return any(m.name == model for m in self.model_refs)


@runtime_checkable
class SubscriptionSource(Protocol):
    """Where subscriptions come from (the controller's informer cache in production)."""

    async def list_subscriptions(self) -> Sequence[Subscription]: ...


class StaticSubscriptionSource:
    """A fixed list, for embedding and for tests of the pure HTTP behaviour."""

    def __init__(self, subscriptions: Iterable[Subscription] = ()) -> None:
        self.subscriptions: list[Subscription] = list(subscriptions)

    async def list_subscriptions(self) -> Sequence[Subscription]:
        return list(self.subscriptions)


def _str_list(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def subscription_from_object(obj: dict[str, Any]) -> Subscription:
    """Convert a MaaSSubscription object (as returned by the API server) into a `Subscription`."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    owner = spec.get("owner") or {}
    groups = tuple(str(g.get("name")) for g in owner.get("groups") or [] if isinstance(g, dict) and g.get("name"))
    refs: list[ModelRef] = []
    for ref in spec.get("modelRefs") or []:
        if not isinstance(ref, dict):
            continue
        limits = tuple(
            TokenRateLimit(int(t.get("limit", 0)), str(t.get("window", "")))
            for t in ref.get("tokenRateLimits") or []
            if isinstance(t, dict)
        )
        billing = ref.get("billingRate") or {}
        refs.append(
            ModelRef(
                str(ref.get("namespace") or meta.get("namespace", "")),
                str(ref.get("name", "")),
                limits,
                billing.get("perToken") if isinstance(billing, dict) else None,
                unlimited=bool(ref.get("unlimited")),
            )
        )
    token_meta = spec.get("tokenMetadata") or {}
    annotations = meta.get("annotations") or {}
    return Subscription(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        owner_users=_str_list(owner.get("users")),
        owner_groups=groups,
        priority=int(spec.get("priority") or 0),
        phase=str(status.get("phase") or ""),
        model_refs=tuple(refs),
        deleting=bool(meta.get("deletionTimestamp")),
        display_name=annotations.get("openshift.io/display-name"),
        description=annotations.get("openshift.io/description"),
        # Seed 000: organization.id is authoritative; tokenMetadata.organizationId is the legacy fallback.
        organization_id=(spec.get("organization") or {}).get("id") or token_meta.get("organizationId"),
        cost_center=token_meta.get("costCenter"),
        labels=dict(token_meta.get("labels") or {}),
    )


class SelectionError(Exception):
    """A subscription could not be chosen; `code` is stable and returned to clients."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _sort_key(sub: Subscription) -> tuple[int, int, str]:
    return (-sub.priority, -sub.max_token_limit, sub.ref)


def rank(subs: Iterable[Subscription]) -> list[Subscription]:
    """Best first: priority desc, max token limit desc, `namespace/name` asc."""
    return sorted(subs, key=_sort_key)


def find(subs: Iterable[Subscription], wanted: str, default_namespace: str) -> Subscription | None:
    """Look up `namespace/name` or a bare name (in `default_namespace`)."""
    ns, _, name = wanted.rpartition("/")
    ns = ns or default_namespace
    for sub in subs:
        if sub.namespace == ns and sub.name == name:
            return sub
    return None


def select_for_mint(
    subs: Sequence[Subscription],
    username: str,
    groups: Sequence[str],
    wanted: str | None,
    default_namespace: str,
) -> Subscription:
    """The subscription a new key is bound to (see the module docstring for the rules)."""
    if wanted:
        sub = find(subs, wanted, default_namespace)
        # Not existing and not owned look the same: no information about other tenants' subscriptions.
        if sub is None or not sub.owned_by(username, groups):
            raise SelectionError("invalid_subscription", f"subscription {wanted!r} not found or not owned by you")
        if not sub.usable:
            raise SelectionError(
                "subscription_not_ready",
                f"subscription {sub.ref} is {'being deleted' if sub.deleting else sub.phase}",
            )
        return sub
    owned = [s for s in subs if s.owned_by(username, groups) and s.usable]
    if not owned:
        raise SelectionError("invalid_subscription", "you do not own any usable subscription")
    return rank(owned)[0]


def select_for_request(
    subs: Sequence[Subscription],
    username: str,
    groups: Sequence[str],
    *,
    requested: str | None,
    bound: str | None,
    model: str | None,
    default_namespace: str,
) -> Subscription:
    """The subscription one gateway request is charged to."""
    explicit = requested or bound
    if explicit:
        sub = find(subs, explicit, default_namespace)
        if sub is None or not sub.owned_by(username, groups):
            raise SelectionError("not_found", f"subscription {explicit!r} not found or not accessible")
        if bound and requested and find(subs, bound, default_namespace) != sub:
            raise SelectionError("access_denied", "the API key is bound to a different subscription")
        if not sub.usable:
            raise SelectionError("subscription_not_ready", f"subscription {sub.ref} is not usable")
        if model and not sub.serves(model):
            raise SelectionError("model_not_in_subscription", f"subscription {sub.ref} does not include {model}")
        return sub
    candidates = [s for s in subs if s.owned_by(username, groups) and s.usable and (not model or s.serves(model))]
    if not candidates:
        raise SelectionError("not_found", "no accessible subscription for this request")
    if len(candidates) > 1:
        names = ", ".join(s.ref for s in rank(candidates))
        raise SelectionError(
            "multiple_subscriptions",
            f"several subscriptions match ({names}); send the X-MaaS-Subscription header to choose one",
        )
    return candidates[0]
