"""A compiled AuthPolicy (`gateway.authpolicy`) evaluated for one request, as Authorino would.

Phases, each over its entries in `priority` order (then name), each entry guarded by its `when`:

1. authentication: `plain` (identity = the value; empty means no credential), `kubernetesTokenReview`
   (credential from `credentials`, default `Authorization: Bearer`; identity = the TokenReview status,
   so `auth.identity.user.username`/`groups`) and `anonymous`. The first entry that resolves wins; none ->
   401 (`unauthenticated`). An entry's `defaults`/`overrides` extend the identity it resolves, which must be an
   object (Authorino's extended properties: a string identity with them is no identity).
2. metadata: `http` callbacks (`url` or `urlExpression`, method, JSON or form body, headers), the parsed
   JSON answer stored at `auth.metadata.<name>`, cached by `cache.key` for `cache.ttl` seconds. A failed
   callback leaves the entry unset (Authorino treats metadata as best effort; authorization decides).
3. authorization: `patternMatching` (CEL predicates, selector/operator patterns, `all`/`any`, refs to
   `spec.patterns`). A false pattern, or an error while evaluating one, -> 403 (`unauthorized`).
4. response: `success.headers` become upstream request headers; `success.filters` become the dynamic
   metadata that rate limiting reads (`filters.identity` -> `auth.identity` in TokenRateLimitPolicies).
   Custom `unauthenticated`/`unauthorized` code, message, headers and body are honoured.

Decision cache: CEL in cel-python costs about a millisecond per expression, and the generated policy has
about twenty, so a whole successful decision is reused for the shortest TTL of the caches it went through
(metadata `cache.ttl`, TokenReview TTL), keyed by exactly the request attributes the policy's expressions
read (found by scanning them at compile time; any reference that cannot be pinned down adds every header, or
every attribute) and, when a TokenReview's audience is the request host, that host (`audience_of_host`).
That is what Authorino's own caches give: a revoked key keeps working at most `cache.ttl` seconds. A policy
with an uncached callback, a failed callback, or a denial is never reused.

Under load the decision of a busy key never expires under its callers: concurrent misses of one key share
one computation (single flight), and a decision is recomputed in the background once `REFRESH_AT` of its
lifetime has passed, bypassing the metadata cache, while the current one keeps being served. A decision
lives at most the TTL counted from when its data was read (the start of the callback, or the cached
callback's own expiry), so a revocation still takes effect within `cache.ttl` seconds; a refresh that is
denied drops the cached decision at once.

Request headers are exposed with lowercase names, repeated headers joined with ",", as Envoy does.
Unsupported features (OPA, SubjectAccessReview, Secret API keys, JWT, wristbands) make `compile_auth_policy`
raise `PolicyError`: the route then answers 500 rather than silently allowing what Authorino would deny.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from maasctl.contract.cel import CelError
from maasctl.gateway.authpolicy import (
    Authentication,
    CompiledAuthPolicy,
    DenyWith,
    Metadata,
    RequestInfo,
    audience_of_host,
)
from maasctl.gateway.expressions import PolicyError
from maasctl.runtime.singleflight import SingleFlight

__all__ = ["AuthOutcome", "AuthPolicyRuntime", "AuthServiceUnavailable", "TokenReview", "TokenReviewer"]

log = logging.getLogger(__name__)

TokenReview = Callable[[str, tuple[str, ...]], Awaitable[Mapping[str, Any] | None]]
"""(token, audiences) -> the TokenReview `status` when authenticated, else None."""


@dataclass
class AuthOutcome:
    """The decision for one request.

    `headers` go upstream, `filters` are the dynamic metadata for rate limiting (`filters["identity"]`),
    `reason` names the rule that decided (for logs, `X-Ext-Auth-Reason` and simulate), `auth` is the final
    `{identity, metadata}` context.
    """

    allowed: bool
    status: int = 200
    message: str = ""
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    filters: dict[str, Any] = field(default_factory=dict)
    deny_headers: dict[str, str] = field(default_factory=dict)
    deny_body: str | None = None
    auth: dict[str, Any] = field(default_factory=dict)


REFRESH_AT = 0.75
"""Fraction of a cached decision's lifetime after which a request starts recomputing it in the background."""


@dataclass
class _Run:
    """Whether (and until when) one decision may be reused; what could not be reached. `refresh`: read the
    callbacks afresh instead of from the metadata cache (a refresh ahead of expiry). `private`: neither read nor
    fill the metadata cache (a simulated identity: what it is answered must never reach a real request)."""

    started: float
    refresh: bool = False
    private: bool = False
    cacheable: bool = True
    expires: float = float("inf")
    unavailable: str | None = None


class AuthServiceUnavailable(Exception):
    """A TokenReview or a metadata service could not answer (connection, timeout, 5xx): the request gets 503,
    never a 401/403 that looks like a permission problem, and never passes."""


class _TtlCache:
    """A small TTL map with a size bound (oldest entries dropped first)."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._data: dict[Any, tuple[float, Any]] = {}
        self._max = max_entries
        self._clock = clock

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self.lookup(key)
        return (False, None) if hit is None else (True, hit[1])

    def lookup(self, key: Any) -> tuple[float, Any] | None:
        """(expiry, value) of a live entry, else None."""
        hit = self._data.get(key)
        if hit is None:
            return None
        if hit[0] <= self._clock():
            del self._data[key]
            return None
        return hit

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl > 0:
            self.put_until(key, value, self._clock() + ttl)

    def put_until(self, key: Any, value: Any, expires: float) -> None:
        now = self._clock()
        if expires <= now:
            return
        if len(self._data) >= self._max:
            for k in [k for k, (exp, _) in self._data.items() if exp <= now] or list(self._data)[: self._max // 10]:
                del self._data[k]
        self._data[key] = (expires, value)

    def discard(self, key: Any) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()


class TokenReviewer:
    """Kubernetes TokenReview with a short cache (tokens are hashed; never stored or logged in clear)."""

    def __init__(
        self,
        review: TokenReview,
        *,
        ttl: float = 10.0,
        negative_ttl: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review = review
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._cache = _TtlCache(clock=clock)

    async def __call__(self, token: str, audiences: tuple[str, ...]) -> Mapping[str, Any] | None:
        key = (hashlib.sha256(token.encode()).hexdigest(), audiences)
        hit, value = self._cache.get(key)
        if hit:
            return value  # type: ignore[no-any-return]
        result = await self._review(token, audiences)
        self._cache.put(key, result, self._ttl if result is not None else self._negative_ttl)
        return result


def _extended(entry: Authentication, identity: Any, activation: Mapping[str, Any]) -> Any:
    """`identity` with the entry's `defaults` and `overrides` (Authorino's extended properties). As in Authorino,
    only an object can be extended: a string identity (a `plain` one) with extended properties is no identity."""
    if not (entry.defaults or entry.overrides):
        return identity
    if not isinstance(identity, Mapping):
        raise PolicyError("extended properties need an identity object")
    merged = dict(identity)
    ctx = {**activation, "auth": {**activation["auth"], "identity": merged}}
    for name, src in entry.defaults:
        merged.setdefault(name, src.get(ctx))
    for name, src in entry.overrides:
        merged[name] = src.get(ctx)
    return merged


def _as_token_review(policy: CompiledAuthPolicy, identity: Mapping[str, Any], activation: Mapping[str, Any]) -> Any:
    """A simulated user+groups as the policy's first TokenReview entry that applies would establish it (its extended
    properties included, e.g. a billing Plan's fallback mark), so a simulation is refused where that user's token
    would be; the identity as given when no TokenReview entry applies."""
    for entry in policy.authentication:
        if entry.kind != "kubernetesTokenReview":
            continue
        try:
            if entry.when and not entry.when.holds(activation):
                continue
        except CelError:
            continue  # as `_authenticate`: an entry whose condition cannot be read does not apply
        return _extended(entry, dict(identity), activation)
    return dict(identity)


def _header_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class AuthPolicyRuntime:
    """Evaluates compiled AuthPolicies: the Authorino of the local gateway.

    `http` makes the metadata callbacks; `token_review` answers Kubernetes TokenReviews; `callback_base`
    (optional) replaces scheme and authority of every callback URL.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        token_review: TokenReview,
        *,
        callback_base: str | None = None,
        callback_secret: str | None = None,
        callback_timeout: float = 5.0,
        audiences_from_host: bool = False,
        token_review_ttl: float = 10.0,
        decision_cache: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._token_review = token_review
        self._callback_base = urlsplit(callback_base) if callback_base else None
        self._callback_secret = callback_secret
        self._timeout = callback_timeout
        self._audiences_from_host = audiences_from_host
        self._clock = clock
        self._cache = _TtlCache(clock=clock)
        self._decisions = _TtlCache(clock=clock)
        self._token_review_ttl = token_review_ttl
        self._decision_cache = decision_cache
        self._inflight: SingleFlight[bytes, AuthOutcome] = SingleFlight()
        self.decision_hits = 0
        self.shared_misses = 0
        """Requests that waited for a computation another request had started (single flight)."""
        self.refreshes = 0
        """Decisions recomputed ahead of their expiry."""

    def clear_caches(self) -> None:
        self._cache.clear()
        self._decisions.clear()

    async def settle(self) -> None:
        """Wait until no decision is being computed (e.g. refreshes ahead of expiry), for tests and shutdown."""
        while self._inflight:
            await asyncio.gather(*self._inflight.running(), return_exceptions=True)

    async def check(
        self,
        policy: CompiledAuthPolicy,
        request: RequestInfo,
        *,
        identity_override: Mapping[str, Any] | None = None,
    ) -> AuthOutcome:
        """Run the four phases. `identity_override` (simulate for user+groups) stands for what a TokenReview would
        return: no credential is checked, the identity is what the policy's TokenReview entry makes of it."""
        if identity_override is not None or not self._decision_cache:
            run = _Run(self._clock(), private=identity_override is not None)
            return await self._check(policy, request, identity_override, run)
        deps = policy.deps.key(request, audience_from_host=self._audiences_from_host)
        key = hashlib.sha256(repr((policy.uid, policy.generation, deps)).encode()).digest()
        hit = self._decisions.lookup(key)
        if hit is not None:
            self.decision_hits += 1
            outcome, refresh_at = hit[1]
            if refresh_at <= self._clock() and key not in self._inflight:
                self.refreshes += 1
                self._start(key, policy, request, refresh=True)
            return outcome  # type: ignore[no-any-return]
        task = self._inflight.get(key)
        if task is None:
            task = self._start(key, policy, request, refresh=False)
        else:
            self.shared_misses += 1
        return await self._inflight.wait(task)  # a client that disconnects does not cancel the others' computation

    def _start(self, key: bytes, policy: CompiledAuthPolicy, request: RequestInfo, *, refresh: bool
               ) -> asyncio.Task[AuthOutcome]:
        def done(t: asyncio.Task[AuthOutcome], _current: bool) -> None:
            if refresh and not t.cancelled() and t.exception() is not None:
                log.warning("auth decision refresh of %s failed: %r", policy.key, t.exception())

        return self._inflight.start(key, self._decide(key, policy, request, refresh), done)

    async def _decide(self, key: bytes, policy: CompiledAuthPolicy, request: RequestInfo, refresh: bool
                      ) -> AuthOutcome:
        run = _Run(self._clock(), refresh=refresh)
        outcome = await self._check(policy, request, None, run)
        if outcome.allowed and run.cacheable and run.expires != float("inf"):
            refresh_at = run.started + REFRESH_AT * (run.expires - run.started)
            self._decisions.put_until(key, (outcome, refresh_at), run.expires)
        elif not outcome.allowed and outcome.status != 503:
            self._decisions.discard(key)  # e.g. the key was revoked: stop serving the old decision now
        return outcome

    async def _check(
        self,
        policy: CompiledAuthPolicy,
        request: RequestInfo,
        identity_override: Mapping[str, Any] | None,
        run: _Run,
    ) -> AuthOutcome:
        activation: dict[str, Any] = {"request": request.attributes(), "auth": {"identity": {}, "metadata": {}}}
        try:
            if policy.when and not policy.when.holds(activation):
                return AuthOutcome(True, reason="policy conditions do not apply")
        except CelError as exc:
            return self._denied(policy.unauthorized, activation, f"policy condition failed: {exc}")
        if identity_override is not None:
            try:
                activation["auth"]["identity"] = _as_token_review(policy, identity_override, activation)
            except (CelError, PolicyError) as exc:
                return self._denied(policy.unauthenticated, activation, f"simulated identity: {exc}")
        else:
            denied = await self._authenticate(policy, request, activation, run)
            if denied is not None:
                return denied
        await self._fetch_metadata(policy, activation, run)
        if run.unavailable is not None:
            return AuthOutcome(False, 503, "the authorization service is unavailable; try again", run.unavailable,
                               auth=dict(activation.get("auth") or {}))
        for rule in policy.authorization:
            try:
                if rule.when and not rule.when.holds(activation):
                    continue
                for pattern in rule.patterns:
                    if not pattern.holds(activation):
                        return self._denied(policy.unauthorized, activation, f"{rule.name}: {pattern.text}")
            except (CelError, PolicyError) as exc:
                return self._denied(policy.unauthorized, activation, f"{rule.name}: {exc}")
        return self._success(policy, activation)

    async def _authenticate(
        self, policy: CompiledAuthPolicy, request: RequestInfo, activation: dict[str, Any], run: _Run
    ) -> AuthOutcome | None:
        if not policy.authentication:
            return None  # an empty map is anonymous access
        failures: list[str] = []
        for entry in policy.authentication:
            try:
                if entry.when and not entry.when.holds(activation):
                    continue
                identity = await self._identity(entry, request, activation)
            except AuthServiceUnavailable as exc:
                run.cacheable = False
                return AuthOutcome(False, 503, "the authentication service is unavailable; try again",
                                   f"{entry.name}: {exc}")
            except CelError as exc:
                failures.append(f"{entry.name}: {exc}")
                continue
            if identity is None:
                failures.append(f"{entry.name}: credential not valid")
                continue
            try:
                identity = _extended(entry, identity, activation)
            except (CelError, PolicyError) as exc:
                failures.append(f"{entry.name}: {exc}")
                continue
            activation["auth"]["identity"] = identity
            if entry.kind == "kubernetesTokenReview":
                run.expires = min(run.expires, run.started + self._token_review_ttl)
            return None
        return self._denied(
            policy.unauthenticated, activation, "; ".join(failures) or "no authentication method applies"
        )

    async def _identity(self, entry: Authentication, request: RequestInfo, activation: dict[str, Any]) -> Any:
        if entry.kind == "anonymous":
            return {"anonymous": True}
        if entry.kind == "plain":
            assert entry.plain is not None
            value = entry.plain.get(activation)
            return value if value not in (None, "", {}, []) else None
        token = entry.credentials.extract(request)
        if not token:
            return None
        audiences = entry.audiences
        if not audiences and self._audiences_from_host:
            audiences = (audience_of_host(request.host),)  # the same host as the decision cache key
        return await self._token_review(token, audiences)

    async def _fetch_metadata(self, policy: CompiledAuthPolicy, activation: dict[str, Any], run: _Run) -> None:
        for entry in policy.metadata:
            try:
                if entry.when and not entry.when.holds(activation):
                    continue
                if entry.cache_key is None or entry.cache_ttl <= 0:
                    run.cacheable = False
                cache_key = None
                if entry.cache_key is not None and entry.cache_ttl > 0 and not run.private:
                    text = _header_text(entry.cache_key.get(activation))
                    cache_key = (policy.uid, policy.generation, entry.name, text)
                    hit = None if run.refresh else self._cache.lookup(cache_key)
                    if hit is not None:
                        run.expires = min(run.expires, hit[0])  # as old as the cached answer, not younger
                        activation["auth"]["metadata"][entry.name] = hit[1]
                        continue
                fetched = self._clock()
                value = await self._call(entry, activation)
            except (httpx.HTTPError, AuthServiceUnavailable) as exc:
                log.warning("metadata %s of %s unavailable: %s", entry.name, policy.key, type(exc).__name__)
                run.cacheable = False
                run.unavailable = run.unavailable or f"metadata service {entry.name} unavailable"
                continue
            except (CelError, PolicyError, ValueError) as exc:
                log.warning("metadata %s of %s failed: %s", entry.name, policy.key, exc)
                run.cacheable = False
                continue
            activation["auth"]["metadata"][entry.name] = value
            if cache_key is not None:
                run.expires = min(run.expires, fetched + entry.cache_ttl)
                self._cache.put_until(cache_key, value, fetched + entry.cache_ttl)

    def _url(self, entry: Metadata, activation: Mapping[str, Any]) -> str:
        url = str(entry.url_program.get(activation) if entry.url_program is not None else entry.url)
        if self._callback_base is not None:
            parts = urlsplit(url)
            url = urlunsplit((self._callback_base.scheme, self._callback_base.netloc, parts.path, parts.query, ""))
        return url

    async def _call(self, entry: Metadata, activation: Mapping[str, Any]) -> Any:
        headers = {name: _header_text(src.get(activation)) for name, src in entry.headers}
        if entry.shared_secret is not None:
            if not self._callback_secret:
                raise AuthServiceUnavailable(f"metadata {entry.name} needs the shared secret; none is configured")
            prefix = f"{entry.shared_secret} " if entry.shared_secret else ""
            headers["authorization"] = prefix + self._callback_secret
        content: bytes | None = None
        if entry.method not in ("GET", "HEAD"):
            headers["content-type"] = entry.content_type
            if entry.body is not None:
                body = entry.body.get(activation)
                content = (body if isinstance(body, str) else json.dumps(body)).encode()
            elif entry.body_parameters:
                params = {name: src.get(activation) for name, src in entry.body_parameters}
                if entry.content_type == "application/json":
                    content = json.dumps(params).encode()
                else:
                    content = urlencode({k: _header_text(v) for k, v in params.items()}).encode()
        response = await self._http.request(
            entry.method, self._url(entry, activation), headers=headers, content=content, timeout=self._timeout
        )
        if response.status_code >= 500:
            raise AuthServiceUnavailable(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise ValueError(f"HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            return response.text

    def _success(self, policy: CompiledAuthPolicy, activation: dict[str, Any]) -> AuthOutcome:
        outcome = AuthOutcome(True, reason="allowed", auth=activation["auth"])
        try:
            for item in policy.headers:
                if item.when and not item.when.holds(activation):
                    continue
                outcome.headers[item.name.lower()] = _header_text(item.render(activation))
            for item in policy.filters:
                if item.when and not item.when.holds(activation):
                    continue
                outcome.filters[item.name] = item.render(activation)
        except CelError as exc:
            return AuthOutcome(False, 500, "the authorization response could not be built", f"response: {exc}")
        return outcome

    def _denied(self, deny: DenyWith, activation: Mapping[str, Any], reason: str) -> AuthOutcome:
        try:
            message = _header_text(deny.message.get(activation)) if deny.message else ""
            headers = {name.lower(): _header_text(src.get(activation)) for name, src in deny.headers}
            body = deny.body.get(activation) if deny.body else None
        except CelError:
            message, headers, body = "Access denied", {}, None
        return AuthOutcome(
            False,
            deny.code,
            message,
            reason,
            deny_headers=headers,
            deny_body=None if body is None else _header_text(body),
            auth=dict(activation.get("auth") or {}),
        )
