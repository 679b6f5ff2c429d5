"""What the gateway enforces right now: a snapshot built from the informer cache.

Informers watch HTTPRoutes, AuthPolicies, TokenRateLimitPolicies, Services and the Secrets labelled
`maas.opendatahub.io/upstream-key=true` (label-selected, so no other Secret is ever read). Every event bumps
a version; the next request rebuilds the snapshot (route table + the policy of each route) if the version
moved. Policies are compiled once per (uid, generation) and reused across rebuilds.

Policy attachment, as Kuadrant resolves it for what maasctl emits: a policy targeting the HTTPRoute (same
namespace; the oldest wins when several do) applies to all its rules; a policy targeting the served Gateway
applies to routes without one (`defaults`) or to every route (`overrides`). No AuthPolicy means anonymous
access, no TokenRateLimitPolicy means no limit, as on a real gateway.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from maasctl.contract.labels import UPSTREAM_KEY_SELECTOR
from maasctl.contract.routing import BASE_URL_MODEL_ANNOTATION, BASE_URL_PREFIX_ANNOTATION, valid_prefix
from maasctl.gateway import attachment  # Kuadrant's defaults/overrides + merge (gateway/attachment.py)
from maasctl.gateway.authpolicy import CompiledAuthPolicy, compile_auth_policy
from maasctl.gateway.config import GatewaySettings
from maasctl.gateway.expressions import PolicyError
from maasctl.gateway.ratelimit import CompiledTokenRateLimitPolicy, compile_token_rate_limit_policy
from maasctl.gateway.requestlimit import CompiledRateLimitPolicy, compile_rate_limit_policy  # billing
from maasctl.gateway.routes import RouteTable, build_route_table
from maasctl.runtime import Cache, Event, GroupVersionKind

__all__ = [
    "AUTH_POLICY",
    "HTTP_ROUTE",
    "RATE_LIMIT_POLICY",
    "SECRET",
    "SERVICE",
    "TOKEN_RATE_LIMIT_POLICY",
    "UPSTREAM_KEY_SELECTOR",
    "GatewayState",
    "InClusterModel",
    "Snapshot",
    "in_cluster_models",
    "upstream_key_of",
]

log = logging.getLogger(__name__)

HTTP_ROUTE: Final = GroupVersionKind("gateway.networking.k8s.io", "v1", "HTTPRoute")
AUTH_POLICY: Final = GroupVersionKind("kuadrant.io", "v1", "AuthPolicy")
TOKEN_RATE_LIMIT_POLICY: Final = GroupVersionKind("kuadrant.io", "v1alpha1", "TokenRateLimitPolicy")
RATE_LIMIT_POLICY: Final = GroupVersionKind("kuadrant.io", "v1", "RateLimitPolicy")  # billing: request counts
SERVICE: Final = GroupVersionKind("", "v1", "Service")
SECRET: Final = GroupVersionKind("", "v1", "Secret")
WATCHED: Final = (HTTP_ROUTE, AUTH_POLICY, TOKEN_RATE_LIMIT_POLICY, SERVICE, SECRET, RATE_LIMIT_POLICY)
UPSTREAM_KEY_FIELD: Final = "api-key"

P = TypeVar("P")


@dataclass
class Snapshot:
    """Routes and per-route policies at one cache version. A PolicyError value means "answer 500"."""

    version: int
    table: RouteTable
    auth: dict[str, CompiledAuthPolicy | PolicyError] = field(default_factory=dict)
    limits: dict[str, CompiledTokenRateLimitPolicy | PolicyError] = field(default_factory=dict)
    requests: dict[str, CompiledRateLimitPolicy | PolicyError] = field(default_factory=dict)  # billing: RLPs
    in_cluster: dict[str, InClusterModel] = field(default_factory=dict)  # base-URL model name -> its route


@dataclass(frozen=True)
class InClusterModel:
    """Where a base-URL request naming an in-cluster model goes (`contract.routing`): `prefix` + the base path,
    which must match the rules of `route` (`ns/name`, the route its AuthPolicy targets)."""

    prefix: str
    route: str


def in_cluster_models(policies: Iterable[Mapping[str, Any]], routes: set[str]) -> dict[str, InClusterModel]:
    """The base-URL names of in-cluster models from their generated AuthPolicies' annotations, for routes on
    the served Gateway (`routes`). A name two policies claim goes to the older one (then `ns/name`), as Gateway
    API precedence picks the older route; an annotation that is not a plain path is ignored (logged)."""
    out: dict[str, tuple[tuple[str, str], InClusterModel]] = {}
    for obj in policies:
        meta = obj["metadata"]
        notes = meta.get("annotations") or {}
        name, prefix = notes.get(BASE_URL_MODEL_ANNOTATION), notes.get(BASE_URL_PREFIX_ANNOTATION)
        kind, target = _targets(obj)
        route = f"{meta.get('namespace', '')}/{target}"
        if not name or not prefix or kind != "HTTPRoute" or route not in routes or meta.get("deletionTimestamp"):
            continue
        if not valid_prefix(str(prefix)):
            log.warning("AuthPolicy %s/%s: %s is not a plain path; not routed from the base URL",
                        meta.get("namespace"), meta.get("name"), BASE_URL_PREFIX_ANNOTATION)
            continue
        rank = (str(meta.get("creationTimestamp", "")), f"{meta.get('namespace')}/{meta.get('name')}")
        held = out.get(str(name))
        if held is None or rank < held[0]:
            out[str(name)] = (rank, InClusterModel(str(prefix), route))
    return {name: model for name, (_, model) in out.items()}


def upstream_key_of(secret: Mapping[str, Any] | None, field: str = UPSTREAM_KEY_FIELD) -> str | None:
    """The provider key in a credential Secret: data `field`, else its only entry; None if absent."""
    if secret is None:
        return None
    data = secret.get("data") or {}
    raw = data.get(field)
    if raw is None and len(data) == 1:
        raw = next(iter(data.values()))
    if not raw:
        return None
    try:
        return base64.b64decode(str(raw), validate=True).decode().strip() or None
    except (binascii.Error, UnicodeDecodeError):
        return None


class _Compiled(Generic[P]):
    """Compile cache keyed by (uid, generation)."""

    def __init__(self, compile_fn: Callable[[Mapping[str, Any]], P]) -> None:
        self._fn = compile_fn
        self._cache: dict[tuple[str, int], P | PolicyError] = {}

    def get(self, obj: Mapping[str, Any]) -> P | PolicyError:
        meta = obj["metadata"]
        key = (str(meta.get("uid", "")), int(meta.get("generation", 0)))
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = self._fn(obj)
            except PolicyError as exc:
                log.error("policy %s/%s cannot be enforced: %s", meta.get("namespace"), meta.get("name"), exc)
                hit = exc
            except (KeyError, TypeError, ValueError) as exc:
                hit = PolicyError(f"malformed policy: {exc}")
            self._cache[key] = hit
        return hit

    def retain(self, live: set[tuple[str, int]]) -> None:
        for key in [k for k in self._cache if k not in live]:
            del self._cache[key]


def _targets(obj: Mapping[str, Any]) -> tuple[str, str]:
    ref = (obj.get("spec") or {}).get("targetRef") or {}
    return str(ref.get("kind", "")), str(ref.get("name", ""))


def _live_key(obj: Mapping[str, Any]) -> tuple[str, int]:
    return str(obj["metadata"].get("uid", "")), int(obj["metadata"].get("generation", 0))


class GatewayState:
    """Watches the cluster through `cache` and hands out snapshots."""

    def __init__(self, cache: Cache, settings: GatewaySettings) -> None:
        self.cache = cache
        self.settings = settings
        self.version = 0
        self._snapshot: Snapshot | None = None
        self._auth = _Compiled(compile_auth_policy)
        self._limits = _Compiled(compile_token_rate_limit_policy)
        self._requests = _Compiled(compile_rate_limit_policy)  # billing
        self._keys: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        for gvk in WATCHED:
            cache.informer(gvk).add_handler(self._changed)

    def _changed(self, _: Event) -> None:
        self.version += 1

    @property
    def gateway(self) -> tuple[str, str]:
        return self.settings.gateway_name, self.settings.gateway_namespace

    def snapshot(self) -> Snapshot:
        """The current snapshot (rebuilt when something changed since the last one)."""
        snap = self._snapshot
        if snap is None or snap.version != self.version:
            snap = self._build(self.version)
            self._snapshot = snap
        return snap

    def _build(self, version: int) -> Snapshot:
        table = build_route_table(
            self.cache.list(HTTP_ROUTE),
            lambda ns, name: self.cache.get(SERVICE, name, ns),
            self.gateway,
        )
        snap = Snapshot(version, table)
        used: set[tuple[str, int]] = set()  # billing: merged (synthetic) policies stay compiled while in use
        routes = table.routes()
        for route in routes:
            ns, name = route.split("/", 1)
            auth = self._attached(AUTH_POLICY, ns, name)
            if auth is not None:
                used.add(_live_key(auth))
                snap.auth[route] = self._auth.get(auth)
            trlp = self._attached(TOKEN_RATE_LIMIT_POLICY, ns, name)
            if trlp is not None:
                used.add(_live_key(trlp))
                snap.limits[route] = self._limits.get(trlp)
            # --- billing: RateLimitPolicy (request counts), enforced by gateway/requestlimit.py ---
            rlp = self._attached(RATE_LIMIT_POLICY, ns, name)
            if rlp is not None:
                used.add(_live_key(rlp))
                snap.requests[route] = self._requests.get(rlp)
            # --- end billing ---
        policies = self.cache.list(AUTH_POLICY)
        snap.in_cluster = in_cluster_models(policies, set(routes))
        self._auth.retain({_live_key(o) for o in policies} | used)
        self._limits.retain({_live_key(o) for o in self.cache.list(TOKEN_RATE_LIMIT_POLICY)} | used)
        self._requests.retain(used)
        return snap

    def _attached(self, gvk: GroupVersionKind, namespace: str, route: str) -> Mapping[str, Any] | None:
        # billing: Kuadrant's effective policy of the path Gateway -> HTTPRoute (see gateway/attachment.py).
        gw_name, gw_ns = self.gateway
        return attachment.effective_policy(
            [o for o in self.cache.list(gvk, gw_ns) if _targets(o) == ("Gateway", gw_name)],
            [o for o in self.cache.list(gvk, namespace) if _targets(o) == ("HTTPRoute", route)],
        )

    def upstream_key(self, namespace: str, name: str, field: str = UPSTREAM_KEY_FIELD) -> str | None:
        """The provider key of a labelled credential Secret (decoded once per resourceVersion)."""
        secret = self.cache.get(SECRET, name, namespace)
        if secret is None:
            return None
        version = str(secret["metadata"].get("resourceVersion", ""))
        hit = self._keys.get((namespace, name, field))
        if hit is None or hit[0] != version:
            hit = (version, upstream_key_of(secret, field))
            self._keys[(namespace, name, field)] = hit
        return hit[1]
