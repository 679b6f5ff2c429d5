"""Who is calling: Kubernetes tokens (TokenReview), admin checks (SubjectAccessReview) and the
`Authenticator` protocol the app depends on. API keys are checked by the app against its own store."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

ADMIN_GROUP = "maas.opendatahub.io"
ADMIN_RESOURCE = "maasauthpolicies"
ADMIN_VERB = "create"


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]
    via: Literal["token", "api_key"] = "token"
    key_id: str | None = None
    key_subscription: str | None = None  # "namespace/name" of the key's bound subscription


@runtime_checkable
class Authenticator(Protocol):
    """Authenticates bearer tokens that are not API keys and decides who is an admin."""

    async def authenticate_token(self, token: str) -> Identity | None:
        """The identity behind a Kubernetes bearer token, or None when it is not valid."""
        ...

    async def is_admin(self, identity: Identity, namespace: str) -> bool:
        """Whether `identity` administers subscriptions in `namespace`."""
        ...


class StaticAuthenticator:
    """Fixed token -> identity table and admin set: for embedding and tests of the HTTP layer only."""

    def __init__(self, tokens: Mapping[str, Identity], admins: Sequence[str] = ()) -> None:
        self._tokens = tokens  # by reference: tests change a user's groups between calls
        self._admins = set(admins)

    async def authenticate_token(self, token: str) -> Identity | None:
        return self._tokens.get(token)

    async def is_admin(self, identity: Identity, namespace: str) -> bool:
        return identity.via == "token" and identity.username in self._admins


class _TTLCache:
    """Small bounded cache of positive answers (keyed by a hash, never by the token itself)."""

    def __init__(self, ttl: float, max_entries: int = 4096) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._data: dict[str, tuple[float, Any]] = {}

    def get(self, key: str) -> Any | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        if hit[0] < time.monotonic():
            self._data.pop(key, None)
            return None
        return hit[1]

    def put(self, key: str, value: Any) -> None:
        if self.ttl <= 0:
            return
        if len(self._data) >= self.max_entries:
            self._data.clear()
        self._data[key] = (time.monotonic() + self.ttl, value)


class KubeAuthenticator:
    """TokenReview for bearer tokens, SubjectAccessReview (`create maasauthpolicies` in the subscription
    namespace) for admin. Positive answers are cached for a few seconds to keep the API server load low."""

    def __init__(self, api_client: Any, *, audiences: Sequence[str] = (), cache_seconds: float = 5.0) -> None:
        from kubernetes_asyncio import client

        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._audiences = list(audiences)
        self._tokens = _TTLCache(cache_seconds)
        self._admin = _TTLCache(cache_seconds)

    async def authenticate_token(self, token: str) -> Identity | None:
        from kubernetes_asyncio import client

        cache_key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(cache_key)
        if isinstance(cached, Identity):
            return cached
        spec = client.V1TokenReviewSpec(token=token, audiences=self._audiences or None)
        review = await self._authn.create_token_review(client.V1TokenReview(spec=spec))
        status = review.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        identity = Identity(username=status.user.username, groups=tuple(status.user.groups or ()))
        self._tokens.put(cache_key, identity)
        return identity

    async def is_admin(self, identity: Identity, namespace: str) -> bool:
        from kubernetes_asyncio import client

        if identity.via != "token":
            return False
        cache_key = f"{identity.username}\x00{','.join(identity.groups)}\x00{namespace}"
        if self._admin.get(cache_key) is True:
            return True
        spec = client.V1SubjectAccessReviewSpec(
            user=identity.username,
            groups=list(identity.groups),
            resource_attributes=client.V1ResourceAttributes(
                group=ADMIN_GROUP, resource=ADMIN_RESOURCE, verb=ADMIN_VERB, namespace=namespace
            ),
        )
        review = await self._authz.create_subject_access_review(client.V1SubjectAccessReview(spec=spec))
        allowed = bool(review.status and review.status.allowed)
        if allowed:
            self._admin.put(cache_key, True)
        return allowed
