"""AuthPolicy (`kuadrant.io/v1`) compiled for the local gateway: the request model and the compiled policy.

`compile_auth_policy` turns a policy object into immutable, pre-compiled CEL programs, once per
(uid, generation), for the features maasctl generates (see `gateway.auth` for how a request is evaluated):
authentication (`plain`, `kubernetesTokenReview`, `anonymous`), metadata (`http` callbacks with `url` or
`urlExpression`), authorization (`patternMatching`) and response (`success.headers`/`filters`, custom
`unauthenticated`/`unauthorized`). It also records which request attributes the policy's expressions read
(the decision cache key). Unsupported features (OPA, SubjectAccessReview, Secret API keys, JWT, wristbands)
raise `PolicyError`: the route then answers 500 rather than silently allowing what Authorino would deny.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from maasctl.contract.credentials import bearer_credential
from maasctl.gateway.expressions import PolicyError, Predicates, ValueSource, lookup, predicates, value_source

__all__ = ["Authentication", "CompiledAuthPolicy", "DenyWith", "Metadata", "RequestInfo", "audience_of_host",
           "compile_auth_policy"]


def audience_of_host(host: str) -> str:
    """The TokenReview audience a request host stands for (Authorino's default when an entry names none): the
    host lower-cased (host names are case-insensitive) without its port (`[v6]:port` keeps the brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.split(":", 1)[0]


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
            if not self.name:
                return value.strip() or None
            return bearer_credential(value, self.name)
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
class Authentication:
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
class Metadata:
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
    shared_secret: str | None = None  # `sharedSecretRef` present: how to send it ("Bearer" prefix) else None


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
class DenyWith:
    code: int
    message: ValueSource | None
    headers: tuple[tuple[str, ValueSource], ...] = ()
    body: ValueSource | None = None


_MACROS = frozenset({"exists", "all", "exists_one", "map", "filter", "size"})
_HEADER_REF = re.compile(r"(?<!\w)(?<!\w\.)request\.headers\b")
_ATTR_REF = re.compile(r"(?<!\w)(?<!\w\.)request\.(\w+)")
_WHOLE_REF = re.compile(r"(?<!\w)(?<!\w\.)request(?!\.\w)\b")
"""`request` not followed by `.name` (`request["host"]`, `string(request)`): any attribute may be read."""
_DOT = re.compile(r"\s*\.\s*")
"""CEL allows blanks around a member `.` (`request . host`): removed before the references are scanned."""
_NAMED_INDEX = re.compile(r'\[\s*"([^"\\]*)"\s*\]')
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_UNUSUAL_LITERAL = re.compile(r'(?<!\w)(?:[rRbB]|[rR][bB]|[bB][rR])["\']|"""|\'\'\'')
"""Raw, byte and triple-quoted CEL literals: their extent is not what `_STRING_LITERAL` reads."""


def _without_literals(text: str) -> str:
    """`text` with the contents of its string literals blanked (same length, so offsets still line up): a
    literal such as "x-auth-request-" is no reference to `request`. Texts with raw, byte or triple-quoted
    literals are returned as they are (read conservatively)."""
    if _UNUSUAL_LITERAL.search(text):
        return text
    return _STRING_LITERAL.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], text)


_ATTRIBUTES = frozenset(RequestInfo("", "", "", {}).attributes()) - {"headers"}


@dataclass(frozen=True)
class _RequestDeps:
    """Which request attributes a policy reads (the decision cache key)."""

    attributes: frozenset[str] = frozenset()
    header_values: frozenset[str] = frozenset()
    header_names: bool = False
    all_headers: bool = False
    host_audience: bool = False  # a TokenReview names no audiences: the host may be the audience

    def key(self, request: RequestInfo, *, audience_from_host: bool = False) -> tuple[Any, ...]:
        """The parts of `request` a decision depends on. `audience_from_host`: the runtime reviews tokens for
        the request host when an entry names no audiences, so the host (as that audience) is part of the key."""
        attrs = request.attributes()
        parts: list[Any] = [tuple(str(attrs.get(a)) for a in sorted(self.attributes))]
        if self.all_headers:
            parts.append(tuple(sorted(request.headers.items())))
        else:
            parts.append(tuple(request.headers.get(h) for h in sorted(self.header_values)))
            if self.header_names:
                parts.append(tuple(sorted(request.headers)))
        if self.host_audience and audience_from_host:
            parts.append(("audience", audience_of_host(request.host)))
        return tuple(parts)


def _request_deps(texts: list[str], selectors: list[str], header_sources: set[str], query: bool,
                  host_audience: bool = False) -> _RequestDeps:
    attributes: set[str] = {"path"} if query else set()
    values = set(header_sources)
    names = False
    full = False
    for original in (_DOT.sub(".", t) for t in texts):
        text = _without_literals(original)
        if _WHOLE_REF.search(text):
            attributes |= _ATTRIBUTES
            full = True
        for m in _ATTR_REF.finditer(text):
            if m.group(1) != "headers":
                attributes.add(m.group(1))
        for m in _HEADER_REF.finditer(text):
            after, before = original[m.end():], text[: m.start()].rstrip()
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
        elif sel == "request":
            attributes |= _ATTRIBUTES
            full = True
    return _RequestDeps(frozenset(attributes), frozenset(values), names, full, host_audience)


@dataclass(frozen=True)
class CompiledAuthPolicy:
    """An AuthPolicy ready to evaluate; rebuilt only when its (uid, generation) changes."""

    namespace: str
    name: str
    uid: str
    generation: int
    when: Predicates
    authentication: tuple[Authentication, ...]
    metadata: tuple[Metadata, ...]
    authorization: tuple[_Authorization, ...]
    headers: tuple[_ResponseItem, ...]
    filters: tuple[_ResponseItem, ...]
    unauthenticated: DenyWith
    unauthorized: DenyWith
    deps: _RequestDeps = field(default_factory=_RequestDeps)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _priority_sorted(entries: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return sorted(entries.items(), key=lambda kv: (int((kv[1] or {}).get("priority", 0)), kv[0]))


def _named_sources(spec: Mapping[str, Any] | None) -> tuple[tuple[str, ValueSource], ...]:
    return tuple((name, value_source(v)) for name, v in (spec or {}).items())


def _authentication(name: str, spec: Mapping[str, Any]) -> Authentication:
    common: dict[str, Any] = {
        "name": name,
        "priority": int(spec.get("priority", 0)),
        "when": predicates(spec.get("when")),
        "credentials": _credentials(spec.get("credentials")),
        "defaults": _named_sources(spec.get("defaults")),
        "overrides": _named_sources(spec.get("overrides")),
    }
    if "plain" in spec:
        return Authentication(kind="plain", plain=value_source(spec["plain"]), **common)
    if "kubernetesTokenReview" in spec:
        audiences = tuple((spec["kubernetesTokenReview"] or {}).get("audiences") or ())
        return Authentication(kind="kubernetesTokenReview", audiences=audiences, **common)
    if "anonymous" in spec:
        return Authentication(kind="anonymous", **common)
    if set(spec) <= {"credentials", "when", "priority", "metrics", "cache", "defaults", "overrides"}:
        raise PolicyError(f"authentication {name!r} names no method (was an empty `kubernetesTokenReview: {{}}` "
                          "dropped before the policy was applied?)")
    raise PolicyError(f"authentication {name!r}: only plain, kubernetesTokenReview and anonymous are supported")


def _metadata(name: str, spec: Mapping[str, Any]) -> Metadata:
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
    shared_secret = None
    if http.get("sharedSecretRef"):
        creds = http.get("credentials") or {"authorizationHeader": {"prefix": "Bearer"}}
        if "authorizationHeader" not in creds:
            raise PolicyError(f"metadata {name!r}: sharedSecretRef is supported with authorizationHeader only")
        shared_secret = str((creds["authorizationHeader"] or {}).get("prefix", "Bearer"))
    return Metadata(
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
        shared_secret=shared_secret,
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


def _deny(spec: Mapping[str, Any] | None, default_code: int, default_message: str) -> DenyWith:
    spec = spec or {}
    return DenyWith(
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
        deps=_deps_of(rules, when, named),
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


def _deps_of(rules: Mapping[str, Any], when: Any, named: Mapping[str, Any]) -> _RequestDeps:
    """What the decision reads of a request: every expression and selector of the rules, the policy's `when` and
    its named patterns (`patternRef`), the credential of each TokenReview, and the host where a TokenReview
    names no audiences."""
    sources = [rules, when, named]
    texts = _strings_under(sources, frozenset({"expression", "predicate", "urlExpression"}), [])
    selectors = _strings_under(sources, frozenset({"selector"}), [])
    header_sources: set[str] = set()
    query = False
    host_audience = False
    for entry in (rules.get("authentication") or {}).values():
        if "kubernetesTokenReview" not in (entry or {}):
            continue
        host_audience = host_audience or not (entry["kubernetesTokenReview"] or {}).get("audiences")
        cred = _credentials(entry.get("credentials"))
        if cred.kind == "authorizationHeader":
            header_sources.add("authorization")
        elif cred.kind == "customHeader":
            header_sources.add(cred.name.lower())
        elif cred.kind == "cookie":
            header_sources.add("cookie")
        else:
            query = True
    return _request_deps(texts, selectors, header_sources, query, host_audience)
