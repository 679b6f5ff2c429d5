"""Typed read views of the MaaS kinds, shared by the controller, maas-api and the gateway.

A view is what the three processes need of a MaaSSubscription, MaaSModelRef or MaaSAuthPolicy, built from
the pydantic models in `maasctl.api` (so it sees exactly what admission accepted) and parsed once per
`(uid, resourceVersion)` by `Views`. An object that does not satisfy its model (stored under an older CRD,
or written while admission was off) becomes a view with `problem` set: it is never a candidate for access,
and the controller reports the problem in its status instead of crashing.

Entitlement (seed 000 `owner`, MaaSAuthPolicy `subjects`): the user name is listed, or one of the caller's
groups is listed, exact and case-sensitive; `*` in either list means every authenticated caller (a non-empty
user name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import ValidationError

from maasctl.api import (
    DESCRIPTION_ANNOTATION,
    DISPLAY_NAME_ANNOTATION,
    MaaSAuthPolicy,
    MaaSModelRef,
    MaaSSubscription,
    parse,
)
from maasctl.runtime.objects import thaw

__all__ = [
    "ANY_AUTHENTICATED",
    "UNUSABLE_PHASES",
    "AuthPolicyView",
    "ModelRefView",
    "SubscribedModel",
    "SubscriptionView",
    "Tier",
    "Views",
    "auth_policy_view",
    "entitled",
    "model_ref_view",
    "subscription_view",
]

ANY_AUTHENTICATED: Final = "*"
UNUSABLE_PHASES: Final = frozenset({"Failed", "Invalid"})


def entitled(users: frozenset[str], groups: frozenset[str], user: str, caller_groups: Iterable[str]) -> bool:
    """The one entitlement rule: listed user, listed group, or `*` for any authenticated caller."""
    if not user:
        return False
    if ANY_AUTHENTICATED in users or ANY_AUTHENTICATED in groups:
        return True
    return user in users or any(g in groups for g in caller_groups)


@dataclass(frozen=True, slots=True)
class _Identity:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    deleting: bool = False
    problem: str | None = None

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


def _identity(obj: Mapping[str, Any], problem: str | None = None) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
        "resource_version": str(meta.get("resourceVersion") or ""),
        "generation": int(meta.get("generation") or 0),
        "deleting": bool(meta.get("deletionTimestamp")),
        "problem": problem,
    }


def _without_status(obj: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(object without status, status): views validate what admission checked (metadata + spec) and read
    the few status fields they need as plain data, so a status written by an older version never makes an
    object unusable."""
    raw = thaw(obj)
    status = raw.pop("status", None)
    return raw, status if isinstance(status, dict) else {}


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"invalid object ({where}: {first.get('msg')})"[:1024]


# --- MaaSSubscription ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tier:
    """One `{limit, window}` of a subscription model."""

    limit: int
    window: str


@dataclass(frozen=True, slots=True)
class SubscribedModel:
    """One `spec.modelRefs` entry of a subscription."""

    namespace: str
    name: str
    tiers: tuple[Tier, ...] = ()
    unlimited: bool = False
    billing_per_token: str | None = None
    guardrails: str | None = None  # the GuardrailConfig ID when guardrails are enabled for this model

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class SubscriptionView(_Identity):
    """What every process needs of a MaaSSubscription."""

    phase: str = ""
    priority: int = 0
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    models: tuple[SubscribedModel, ...] = ()
    inference_priority: int | None = None
    organization_id: str | None = None  # for telemetry: organization.id, else tokenMetadata.organizationId
    cost_center: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    display_name: str | None = None
    description: str | None = None
    organization: str | None = None  # spec.organization.id alone: delegated administration (immutable once set)
    gateway: str | None = None  # spec.gatewayRef as `namespace/name`; None: the default Gateway

    @property
    def usable(self) -> bool:
        """Valid, not being deleted, not Failed/Invalid: may get new keys and serve requests."""
        return self.problem is None and not self.deleting and self.phase not in UNUSABLE_PHASES

    def entitles(self, user: str, groups: Iterable[str]) -> bool:
        return entitled(self.users, self.groups, user, groups)

    def model(self, key: str) -> SubscribedModel | None:
        """The entry for `namespace/name`, or None."""
        return next((m for m in self.models if m.key == key), None)

    def includes(self, key: str) -> bool:
        return self.model(key) is not None

    def tenant_gateway(self, default_gateway: str) -> str:
        """`namespace/name` of the Gateway this subscription is used through."""
        return self.gateway or default_gateway

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def subscription_view(obj: Mapping[str, Any]) -> SubscriptionView:
    """Parse a MaaSSubscription (as cached: frozen or plain) into its view."""
    raw, status = _without_status(obj)
    try:
        sub = parse(MaaSSubscription, raw)
    except ValidationError as exc:
        return SubscriptionView(**_identity(obj, _problem(exc)))
    spec = sub.spec
    meta = sub.metadata
    token_meta = spec.token_metadata
    annotations = meta.annotations or {}
    models = tuple(
        SubscribedModel(
            namespace=m.namespace,
            name=m.name,
            tiers=tuple(Tier(t.limit, t.window) for t in m.token_rate_limits or ()),
            unlimited=bool(m.unlimited),
            billing_per_token=m.billing_rate.per_token if m.billing_rate else None,
            guardrails=m.guardrails.config if m.guardrails is not None and m.guardrails.enabled else None,
        )
        for m in spec.model_refs
    )
    return SubscriptionView(
        **_identity(obj),
        phase=str(status.get("phase") or ""),
        priority=spec.priority,
        users=frozenset(spec.owner.users or ()),
        groups=frozenset(g.name for g in spec.owner.groups or ()),
        models=models,
        inference_priority=spec.inference_priority,
        # Seed 000: organization.id is authoritative; tokenMetadata.organizationId is the legacy fallback.
        organization_id=(spec.organization.id if spec.organization else None)
        or (token_meta.organization_id if token_meta else None),
        cost_center=token_meta.cost_center if token_meta else None,
        labels=tuple(sorted((token_meta.labels or {}).items())) if token_meta else (),
        display_name=annotations.get(DISPLAY_NAME_ANNOTATION),
        description=annotations.get(DESCRIPTION_ANNOTATION),
        organization=spec.organization.id if spec.organization else None,
        gateway=f"{spec.gateway_ref.namespace}/{spec.gateway_ref.name}" if spec.gateway_ref else None,
    )


# --- MaaSModelRef ----------------------------------------------------------------------------------------


def _epoch(ts: Any) -> int:
    if isinstance(ts, datetime):
        return int(ts.timestamp())
    if isinstance(ts, str):
        try:
            return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())
        except ValueError:
            return 0
    return 0


@dataclass(frozen=True, slots=True)
class ModelRefView(_Identity):
    """What every process needs of a MaaSModelRef."""

    kind: str = ""
    target: str = ""
    endpoint_override: str | None = None
    phase: str = "Pending"
    endpoint: str | None = None
    model_id: str = ""
    created: int = 0
    display_name: str | None = None
    description: str | None = None

    @property
    def ready(self) -> bool:
        return self.problem is None and not self.deleting and self.phase == "Ready" and bool(self.endpoint)


def model_ref_view(obj: Mapping[str, Any]) -> ModelRefView:
    raw, status = _without_status(obj)
    created = _epoch((raw.get("metadata") or {}).get("creationTimestamp"))
    try:
        mr = parse(MaaSModelRef, raw)
    except ValidationError as exc:
        return ModelRefView(**_identity(obj, _problem(exc)), created=created)
    annotations = mr.metadata.annotations or {}
    return ModelRefView(
        **_identity(obj),
        kind=str(mr.spec.model_ref.kind),
        target=mr.spec.model_ref.name,
        endpoint_override=str(mr.spec.endpoint_override) if mr.spec.endpoint_override else None,
        phase=str(status.get("phase") or "Pending"),
        endpoint=str(status.get("endpoint") or "") or None,
        model_id=str(status.get("resolvedModelAlias") or mr.metadata.name),
        created=created,
        display_name=annotations.get(DISPLAY_NAME_ANNOTATION),
        description=annotations.get(DESCRIPTION_ANNOTATION),
    )


# --- MaaSAuthPolicy --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthPolicyView(_Identity):
    """What every process needs of a MaaSAuthPolicy: which models it opens to whom."""

    models: tuple[str, ...] = ()
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    organization_id: str | None = None
    cost_center: str | None = None

    def entitles(self, user: str, groups: Iterable[str]) -> bool:
        return entitled(self.users, self.groups, user, groups)

    @property
    def grants(self) -> bool:
        """Valid, not deleting, with at least one subject: it may open models."""
        return self.problem is None and not self.deleting and bool(self.users or self.groups)


def auth_policy_view(obj: Mapping[str, Any]) -> AuthPolicyView:
    raw, _ = _without_status(obj)
    try:
        policy = parse(MaaSAuthPolicy, raw)
    except ValidationError as exc:
        return AuthPolicyView(**_identity(obj, _problem(exc)))
    spec = policy.spec
    metering = spec.metering_metadata
    return AuthPolicyView(
        **_identity(obj),
        models=tuple(f"{m.namespace}/{m.name}" for m in spec.model_refs),
        users=frozenset(spec.subjects.users or ()),
        groups=frozenset(g.name for g in spec.subjects.groups or ()),
        organization_id=metering.organization_id if metering else None,
        cost_center=metering.cost_center if metering else None,
    )


# --- the per-process cache of views ----------------------------------------------------------------------

V = TypeVar("V")


@dataclass
class Views:
    """Views of cached objects, parsed once per `(uid, resourceVersion)`.

    One instance per process component (the controller's Context, maas-api's sources, the gateway); it holds
    at most `max_entries` views per kind and starts over when that is exceeded (objects are re-parsed lazily).
    """

    max_entries: int = 50_000
    _store: dict[str, dict[str, tuple[str, Any]]] = field(default_factory=dict)

    def _get(self, kind: str, obj: Mapping[str, Any], build: Callable[[Mapping[str, Any]], V]) -> V:
        meta = obj.get("metadata") or {}
        ident = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        version = str(meta.get("resourceVersion") or "")
        table = self._store.setdefault(kind, {})
        hit = table.get(ident)
        if hit is not None and hit[0] == version and version:
            return hit[1]  # type: ignore[no-any-return]
        view = build(obj)
        if len(table) >= self.max_entries:
            table.clear()
        table[ident] = (version, view)
        return view

    def subscription(self, obj: Mapping[str, Any]) -> SubscriptionView:
        return self._get("MaaSSubscription", obj, subscription_view)

    def model_ref(self, obj: Mapping[str, Any]) -> ModelRefView:
        return self._get("MaaSModelRef", obj, model_ref_view)

    def auth_policy(self, obj: Mapping[str, Any]) -> AuthPolicyView:
        return self._get("MaaSAuthPolicy", obj, auth_policy_view)
