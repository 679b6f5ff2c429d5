"""AuthPolicy (`kuadrant.io/v1`) interpreted as Authorino would, for the features maasctl generates.

Phases, each over its entries in `priority` order (then name), each entry guarded by its `when`:

1. authentication: `plain` (identity = the value; empty means no credential), `kubernetesTokenReview`
   (credential from `credentials`, default `Authorization: Bearer`; identity = the TokenReview status,
   so `auth.identity.user.username`/`groups`) and `anonymous`. The first entry that resolves wins; none ->
   401 (`unauthenticated`).
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
read (found by scanning them at compile time; any reference that cannot be pinned down adds every header).
That is what Authorino's own caches give: a revoked key keeps working at most `cache.ttl` seconds. A policy
with an uncached callback, a failed callback, or a denial is never reused.

Request headers are exposed with lowercase names, repeated headers joined with ",", as Envoy does.
Unsupported features (OPA, SubjectAccessReview, Secret API keys, JWT, wristbands) make `compile_auth_policy`
raise `PolicyError`: the route then answers 500 rather than silently allowing what Authorino would deny.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from maasctl.contract.cel import CelError
from maasctl.gateway.expressions import PolicyError, Predicates, ValueSource, lookup, predicates, value_source

__all__ = [
    "AuthOutcome",
    "AuthPolicyRuntime",
    "CompiledAuthPolicy",
    "RequestInfo",
    "TokenReviewer",
    "compile_auth_policy",
]

log = logging.getLogger(__name__)

TokenReview = Callable[[str, tuple[str, ...]], Awaitable[Mapping[str, Any] | None]]
"""(token, audiences) -> the TokenReview `status` when authenticated, else None."""


@dataclass(frozen=True)
class RequestInfo:
    """The request attributes policies see (`request.*` in CEL)."""

    method: str
    path: str  # with query string, as Envoy's :path
    host: str
    headers: Mapping[str, str]  # lowercase names
    scheme: str = "http"

    @property
    def url_path(self) -> str:
        return self.path.split("?", 1)[0]

    def attributes(self) -> dict[str, Any]:
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        return {
            "method": self.method,
            "path": self.path,
            "url_path": self.url_path,
            "host": self.host,
            "scheme": self.scheme,
            "query": query,
            "headers": dict(self.headers),
            "protocol": "HTTP/1.1",
        }


# --- compiled policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Credentials:
    kind: str = "authorizationHeader"  # authorizationHeader | customHeader | queryString | cookie
    name: str = "Bearer"  # prefix for authorizationHeader, else the header/param/cookie name

    def extract(self, request: RequestInfo) -> str | None:
        if self.kind == "authorizationHeader":
            value = request.headers.get("authorization", "")
            prefix = self.name + " " if self.name else ""
            return value[len(prefix):].strip() or None if value.startswith(prefix) else None
        if self.kind == "customHeader":
            return request.headers.get(self.name.lower()) or None
        if self.kind == "queryString":
            query = request.path.split("?", 1)[1] if "?" in request.path else ""
            for pair in query.split("&"):
                key, _, value = pair.partition("=")
                if key == self.name and value:
                    return value
            return None
        for part in request.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == self.name and value:
                return value
        return None


def _credentials(spec: Mapping[str, Any] | None) -> _Credentials:
    if not spec:
        return _Credentials()
    if "authorizationHeader" in spec:
        return _Credentials("authorizationHeader", str((spec["authorizationHeader"] or {}).get("prefix", "Bearer")))
    for kind in ("customHeader", "queryString", "cookie"):
        if kind in spec:
            return _Credentials(kind, str(spec[kind]["name"]))
    return _Credentials()


@dataclass(frozen=True)
class _Authentication:
    name: str
    priority: int
    when: Predicates
    kind: str  # plain | kubernetesTokenReview | anonymous
    plain: ValueSource | None = None
    audiences: tuple[str, ...] = ()
    credentials: _Credentials = field(default_factory=_Credentials)
    defaults: tuple[tuple[str, ValueSource], ...] = ()
    overrides: tuple[tuple[str, ValueSource], ...] = ()


@dataclass(frozen=True)
class _Metadata:
    name: str
    priority: int
    when: Predicates
    method: str
    url: str | None
    url_program: ValueSource | None
    content_type: str
    body: ValueSource | None
    body_parameters: tuple[tuple[str, ValueSource], ...]
    headers: tuple[tuple[str, ValueSource], ...]
    cache_key: ValueSource | None
    cache_ttl: float


@dataclass(frozen=True)
class _Pattern:
    """A predicate, a selector/operator/value check, or a combination."""

    predicate: ValueSource | None = None
    selector: str | None = None
    operator: str = "eq"
    value: str = ""
    all_of: tuple[_Pattern, ...] | None = None
    any_of: tuple[_Pattern, ...] | None = None
    text: str = ""

    def holds(self, activation: Mapping[str, Any]) -> bool:
        if self.all_of is not None:
            return all(p.holds(activation) for p in self.all_of)
        if self.any_of is not None:
            return any(p.holds(activation) for p in self.any_of)
        if self.predicate is not None:
            result = self.predicate.get(activation)
            if not isinstance(result, bool):
                raise PolicyError(f"pattern {self.text!r} is not a bool")
            return result
        got = lookup(activation, self.selector or "")
        text = got if isinstance(got, str) else json.dumps(got)
        if self.operator == "eq":
            return text == self.value
        if self.operator == "neq":
            return text != self.value
        if self.operator in ("incl", "excl"):
            inside = isinstance(got, list) and self.value in [str(v) for v in got]
            return inside if self.operator == "incl" else not inside
        if self.operator == "matches":
            return re.search(self.value, text) is not None
        raise PolicyError(f"unknown pattern operator {self.operator!r}")


@dataclass(frozen=True)
class _Authorization:
    name: str
    priority: int
    when: Predicates
    patterns: tuple[_Pattern, ...]


@dataclass(frozen=True)
class _ResponseItem:
    name: str  # header name or dynamic metadata root key
    when: Predicates
    plain: ValueSource | None = None
    properties: tuple[tuple[str, ValueSource], ...] = ()

    def render(self, activation: Mapping[str, Any]) -> Any:
        if self.plain is not None:
            return self.plain.get(activation)
        return {name: src.get(activation) for name, src in self.properties}


@dataclass(frozen=True)
class _DenyWith:
    code: int
    message: ValueSource | None
    headers: tuple[tuple[str, ValueSource], ...] = ()
    body: ValueSource | None = None


_MACROS = frozenset({"exists", "all", "exists_one", "map", "filter", "size"})
_HEADER_REF = re.compile(r"request\.headers\b")
_ATTR_REF = re.compile(r"request\.(\w+)")
_NAMED_INDEX = re.compile(r'\[\s*"([^"\\]*)"\s*\]')


@dataclass(frozen=True)
class _RequestDeps:
    """Which request attributes a policy reads (the decision cache key)."""

    attributes: frozenset[str] = frozenset()
    header_values: frozenset[str] = frozenset()
    header_names: bool = False
    all_headers: bool = False

    def key(self, request: RequestInfo) -> tuple[Any, ...]:
        attrs = request.attributes()
        parts: list[Any] = [tuple(str(attrs.get(a)) for a in sorted(self.attributes))]
        if self.all_headers:
            parts.append(tuple(sorted(request.headers.items())))
        else:
            parts.append(tuple(request.headers.get(h) for h in sorted(self.header_values)))
            if self.header_names:
                parts.append(tuple(sorted(request.headers)))
        return tuple(parts)


def _request_deps(texts: list[str], selectors: list[str], header_sources: set[str], query: bool) -> _RequestDeps:
    attributes: set[str] = {"path"} if query else set()
    values = set(header_sources)
    names = False
    full = False
    for text in texts:
        for m in _ATTR_REF.finditer(text):
            if m.group(1) != "headers":
                attributes.add(m.group(1))
        for m in _HEADER_REF.finditer(text):
            after, before = text[m.end():], text[: m.start()].rstrip()
            member = re.match(r"\.(\w+)\s*(\()?", after)
            index = _NAMED_INDEX.match(after)
            if member and member.group(1) in _MACROS:
                names = True
            elif member and not member.group(2):
                values.add(member.group(1).lower())
            elif index:
                values.add(index.group(1).lower())
            elif after[:1] not in (".", "[") and re.search(r"(^|\W)in$", before):
                names = True
            else:
                full = True
    for sel in selectors:
        if sel.startswith("request.headers."):
            values.add(sel.split(".", 2)[2].lower())
        elif sel.startswith("request.headers"):
            full = True
        elif sel.startswith("request."):
            attributes.add(sel.split(".")[1])
    return _RequestDeps(frozenset(attributes), frozenset(values), names, full)


@dataclass(frozen=True)
class CompiledAuthPolicy:
    """An AuthPolicy ready to evaluate; rebuilt only when its (uid, generation) changes."""

    namespace: str
    name: str
    uid: str
    generation: int
    when: Predicates
    authentication: tuple[_Authentication, ...]
    metadata: tuple[_Metadata, ...]
    authorization: tuple[_Authorization, ...]
    headers: tuple[_ResponseItem, ...]
    filters: tuple[_ResponseItem, ...]
    unauthenticated: _DenyWith
    unauthorized: _DenyWith
    deps: _RequestDeps = field(default_factory=_RequestDeps)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _priority_sorted(entries: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return sorted(entries.items(), key=lambda kv: (int((kv[1] or {}).get("priority", 0)), kv[0]))


def _named_sources(spec: Mapping[str, Any] | None) -> tuple[tuple[str, ValueSource], ...]:
    return tuple((name, value_source(v)) for name, v in (spec or {}).items())


def _authentication(name: str, spec: Mapping[str, Any]) -> _Authentication:
    common: dict[str, Any] = {
        "name": name,
        "priority": int(spec.get("priority", 0)),
        "when": predicates(spec.get("when")),
        "credentials": _credentials(spec.get("credentials")),
        "defaults": _named_sources(spec.get("defaults")),
        "overrides": _named_sources(spec.get("overrides")),
    }
    if "plain" in spec:
        return _Authentication(kind="plain", plain=value_source(spec["plain"]), **common)
    if "kubernetesTokenReview" in spec:
        audiences = tuple((spec["kubernetesTokenReview"] or {}).get("audiences") or ())
        return _Authentication(kind="kubernetesTokenReview", audiences=audiences, **common)
    if "anonymous" in spec:
        return _Authentication(kind="anonymous", **common)
    if set(spec) <= {"credentials", "when", "priority", "metrics", "cache", "defaults", "overrides"}:
        raise PolicyError(f"authentication {name!r} names no method (was an empty `kubernetesTokenReview: {{}}` "
                          "dropped before the policy was applied?)")
    raise PolicyError(f"authentication {name!r}: only plain, kubernetesTokenReview and anonymous are supported")


def _metadata(name: str, spec: Mapping[str, Any]) -> _Metadata:
    http = spec.get("http")
    if not http:
        raise PolicyError(f"metadata {name!r}: only http is supported")
    url = http.get("url")
    if url is not None and "{" in str(url):
        raise PolicyError(f"metadata {name!r}: url placeholders are not supported, use urlExpression")
    url_program = value_source({"expression": http["urlExpression"]}) if "urlExpression" in http else None
    if (url is None) == (url_program is None):
        raise PolicyError(f"metadata {name!r}: exactly one of url and urlExpression is required")
    cache = spec.get("cache") or {}
    return _Metadata(
        name=name,
        priority=int(spec.get("priority", 0)),
        when=predicates(spec.get("when")),
        method=str(http.get("method", "GET")).upper(),
        url=url,
        url_program=url_program,
        content_type=str(http.get("contentType", "application/x-www-form-urlencoded")),
        body=value_source(http["body"]) if http.get("body") else None,
        body_parameters=_named_sources(http.get("bodyParameters")),
        headers=_named_sources(http.get("headers")),
        cache_key=value_source(cache["key"]) if cache.get("key") else None,
        cache_ttl=float(cache.get("ttl", 60)),
    )


def _pattern(spec: Mapping[str, Any], named: Mapping[str, Any], depth: int = 0) -> _Pattern:
    if depth > 16:
        raise PolicyError("patterns nest too deeply")
    if "predicate" in spec:
        text = str(spec["predicate"])
        return _Pattern(predicate=value_source({"expression": text}), text=text)
    if "all" in spec:
        return _Pattern(all_of=tuple(_pattern(p, named, depth + 1) for p in spec["all"] or ()))
    if "any" in spec:
        return _Pattern(any_of=tuple(_pattern(p, named, depth + 1) for p in spec["any"] or ()))
    if "patternRef" in spec:
        ref = named.get(str(spec["patternRef"]))
        if ref is None:
            raise PolicyError(f"patternRef {spec['patternRef']!r} is not defined")
        return _Pattern(all_of=tuple(_pattern(p, named, depth + 1) for p in ref.get("allOf") or ()))
    if "selector" in spec:
        return _Pattern(
            selector=str(spec["selector"]),
            operator=str(spec.get("operator", "eq")),
            value=str(spec.get("value", "")),
            text=f"{spec['selector']} {spec.get('operator', 'eq')} {spec.get('value', '')}",
        )
    raise PolicyError(f"unsupported pattern {dict(spec)!r}")


def _authorization(name: str, spec: Mapping[str, Any], named: Mapping[str, Any]) -> _Authorization:
    matching = spec.get("patternMatching")
    if not matching:
        raise PolicyError(f"authorization {name!r}: only patternMatching is supported")
    return _Authorization(
        name=name,
        priority=int(spec.get("priority", 0)),
        when=predicates(spec.get("when")),
        patterns=tuple(_pattern(p, named) for p in matching.get("patterns") or ()),
    )


def _response_item(name: str, spec: Mapping[str, Any]) -> _ResponseItem:
    key = str(spec.get("key") or name)
    when = predicates(spec.get("when"))
    if "plain" in spec:
        return _ResponseItem(key, when, plain=value_source(spec["plain"]))
    if "json" in spec:
        return _ResponseItem(key, when, properties=_named_sources((spec["json"] or {}).get("properties")))
    raise PolicyError(f"response item {name!r}: only plain and json are supported")


def _deny(spec: Mapping[str, Any] | None, default_code: int, default_message: str) -> _DenyWith:
    spec = spec or {}
    return _DenyWith(
        code=int(spec.get("code", default_code)),
        message=value_source(spec["message"]) if spec.get("message") else ValueSource(value=default_message),
        headers=_named_sources(spec.get("headers")),
        body=value_source(spec["body"]) if spec.get("body") else None,
    )


def _rule_block(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any, Mapping[str, Any]]:
    """(rules, when, patterns) of whichever form the policy uses (implicit defaults, defaults, overrides)."""
    for form in ("overrides", "defaults"):
        if spec.get(form):
            block = spec[form]
            return block.get("rules") or {}, block.get("when"), block.get("patterns") or {}
    return spec.get("rules") or {}, spec.get("when"), spec.get("patterns") or {}


def compile_auth_policy(policy: Mapping[str, Any]) -> CompiledAuthPolicy:
    """Compile an AuthPolicy object (every CEL expression once).

    Raises:
        PolicyError: an unsupported feature, or an expression that does not compile.
    """
    meta = policy["metadata"]
    rules, when, named = _rule_block(policy.get("spec") or {})
    response = rules.get("response") or {}
    success = response.get("success") or {}
    return CompiledAuthPolicy(
        namespace=str(meta.get("namespace", "")),
        name=str(meta["name"]),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 0)),
        when=predicates(when),
        authentication=tuple(_authentication(n, s) for n, s in _priority_sorted(rules.get("authentication") or {})),
        metadata=tuple(_metadata(n, s) for n, s in _priority_sorted(rules.get("metadata") or {})),
        authorization=tuple(
            _authorization(n, s, named) for n, s in _priority_sorted(rules.get("authorization") or {})
        ),
        headers=tuple(_response_item(n, s) for n, s in sorted((success.get("headers") or {}).items())),
        filters=tuple(_response_item(n, s) for n, s in sorted((success.get("filters") or {}).items())),
        unauthenticated=_deny(response.get("unauthenticated"), 401, "Authentication required"),
        unauthorized=_deny(response.get("unauthorized"), 403, "Access denied"),
        deps=_deps_of(rules, when),
    )


def _strings_under(node: Any, keys: frozenset[str], out: list[str]) -> list[str]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k in keys and isinstance(v, str):
                out.append(v)
            else:
                _strings_under(v, keys, out)
    elif isinstance(node, list | tuple):
        for v in node:
            _strings_under(v, keys, out)
    return out


def _deps_of(rules: Mapping[str, Any], when: Any) -> _RequestDeps:
    texts = _strings_under([rules, when], frozenset({"expression", "predicate", "urlExpression"}), [])
    selectors = _strings_under([rules, when], frozenset({"selector"}), [])
    header_sources: set[str] = set()
    query = False
    for entry in (rules.get("authentication") or {}).values():
        if "kubernetesTokenReview" not in (entry or {}):
            continue
        cred = _credentials(entry.get("credentials"))
        if cred.kind == "authorizationHeader":
            header_sources.add("authorization")
        elif cred.kind == "customHeader":
            header_sources.add(cred.name.lower())
        elif cred.kind == "cookie":
            header_sources.add("cookie")
        else:
            query = True
    return _request_deps(texts, selectors, header_sources, query)


# --- evaluation -----------------------------------------------------------------------------------------


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


@dataclass
class _Run:
    """Whether (and for how long) one decision may be reused."""

    cacheable: bool = True
    ttl: float = float("inf")


class _TtlCache:
    """A small TTL map with a size bound (oldest entries dropped first)."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._data: dict[Any, tuple[float, Any]] = {}
        self._max = max_entries
        self._clock = clock

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._data.get(key)
        if hit is None:
            return False, None
        if hit[0] <= self._clock():
            del self._data[key]
            return False, None
        return True, hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._data) >= self._max:
            now = self._clock()
            for k in [k for k, (exp, _) in self._data.items() if exp <= now] or list(self._data)[: self._max // 10]:
                del self._data[k]
        self._data[key] = (self._clock() + ttl, value)

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
        callback_timeout: float = 5.0,
        audiences_from_host: bool = False,
        token_review_ttl: float = 10.0,
        decision_cache: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._token_review = token_review
        self._callback_base = urlsplit(callback_base) if callback_base else None
        self._timeout = callback_timeout
        self._audiences_from_host = audiences_from_host
        self._cache = _TtlCache(clock=clock)
        self._decisions = _TtlCache(clock=clock)
        self._token_review_ttl = token_review_ttl
        self._decision_cache = decision_cache
        self.decision_hits = 0

    def clear_caches(self) -> None:
        self._cache.clear()
        self._decisions.clear()

    async def check(
        self,
        policy: CompiledAuthPolicy,
        request: RequestInfo,
        *,
        identity_override: Mapping[str, Any] | None = None,
    ) -> AuthOutcome:
        """Run the four phases. `identity_override` skips authentication (simulate for user+groups)."""
        if identity_override is not None or not self._decision_cache:
            return await self._check(policy, request, identity_override, _Run())
        key = hashlib.sha256(repr((policy.uid, policy.generation, policy.deps.key(request))).encode()).digest()
        hit, cached = self._decisions.get(key)
        if hit:
            self.decision_hits += 1
            return cached  # type: ignore[no-any-return]
        run = _Run()
        outcome = await self._check(policy, request, None, run)
        if outcome.allowed and run.cacheable and run.ttl != float("inf"):
            self._decisions.put(key, outcome, run.ttl)
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
            activation["auth"]["identity"] = dict(identity_override)
        else:
            denied = await self._authenticate(policy, request, activation, run)
            if denied is not None:
                return denied
        await self._fetch_metadata(policy, activation, run)
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
            except CelError as exc:
                failures.append(f"{entry.name}: {exc}")
                continue
            if identity is None:
                failures.append(f"{entry.name}: credential not valid")
                continue
            if isinstance(identity, Mapping) and (entry.defaults or entry.overrides):
                merged = dict(identity)
                ctx = {**activation, "auth": {**activation["auth"], "identity": merged}}
                for name, src in entry.defaults:
                    merged.setdefault(name, src.get(ctx))
                for name, src in entry.overrides:
                    merged[name] = src.get(ctx)
                identity = merged
            activation["auth"]["identity"] = identity
            if entry.kind == "kubernetesTokenReview":
                run.ttl = min(run.ttl, self._token_review_ttl)
            return None
        return self._denied(
            policy.unauthenticated, activation, "; ".join(failures) or "no authentication method applies"
        )

    async def _identity(self, entry: _Authentication, request: RequestInfo, activation: dict[str, Any]) -> Any:
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
            audiences = (request.host.split(":", 1)[0],)
        return await self._token_review(token, audiences)

    async def _fetch_metadata(self, policy: CompiledAuthPolicy, activation: dict[str, Any], run: _Run) -> None:
        for entry in policy.metadata:
            try:
                if entry.when and not entry.when.holds(activation):
                    continue
                if entry.cache_key is None or entry.cache_ttl <= 0:
                    run.cacheable = False
                else:
                    run.ttl = min(run.ttl, entry.cache_ttl)
                cache_key = None
                if entry.cache_key is not None and entry.cache_ttl > 0:
                    text = _header_text(entry.cache_key.get(activation))
                    cache_key = (policy.uid, policy.generation, entry.name, text)
                    hit, value = self._cache.get(cache_key)
                    if hit:
                        activation["auth"]["metadata"][entry.name] = value
                        continue
                value = await self._call(entry, activation)
            except (CelError, PolicyError, httpx.HTTPError, ValueError) as exc:
                log.warning("metadata %s of %s failed: %s", entry.name, policy.key, exc)
                run.cacheable = False
                continue
            activation["auth"]["metadata"][entry.name] = value
            if cache_key is not None:
                self._cache.put(cache_key, value, entry.cache_ttl)

    def _url(self, entry: _Metadata, activation: Mapping[str, Any]) -> str:
        url = str(entry.url_program.get(activation) if entry.url_program is not None else entry.url)
        if self._callback_base is not None:
            parts = urlsplit(url)
            url = urlunsplit((self._callback_base.scheme, self._callback_base.netloc, parts.path, parts.query, ""))
        return url

    async def _call(self, entry: _Metadata, activation: Mapping[str, Any]) -> Any:
        headers = {name: _header_text(src.get(activation)) for name, src in entry.headers}
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

    def _denied(self, deny: _DenyWith, activation: Mapping[str, Any], reason: str) -> AuthOutcome:
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
