"""The route table: which HTTPRoute rule serves a request, and where it goes upstream.

Built from the cached HTTPRoutes attached to the served Gateway and the Services their backendRefs name,
following Gateway API semantics for the features maasctl emits:

- matches: `path` Exact or PathPrefix (element-wise: `/a/b` matches `/a/b/c`, not `/a/bc`), optional
  `method` and Exact/RegularExpression `headers`; route `hostnames` (exact or `*.` wildcard) against Host.
- precedence: exact hostname over wildcard over none, then Exact over PathPrefix, longer prefix first, then
  method, more header matches, older route, `namespace/name`, rule order (the Gateway API tie-breakers).
- filters: URLRewrite (ReplacePrefixMatch / ReplaceFullPath, hostname) and RequestHeaderModifier.
- backendRefs: core Services in the route's namespace. ExternalName -> `http(s)://<externalName>:<port>`
  (https when the port is named or has appProtocol `https`, or is 443); any Service annotated
  `maasctl.opendatahub.io/local-url` -> that URL (how a ClusterIP model is reached from a laptop).
  Several refs are picked by weight. A rule whose refs all fail to resolve answers 500, as the spec asks.
- `timeouts.request` bounds the upstream call.
- an ExternalModel route's published and target model names (`contract.labels`) become the rule's
  `rename`: the body's `model` is checked and rewritten (`dataplane.body.prepare_body`).
- the route's `maas.opendatahub.io/api-format` and `maas.opendatahub.io/upstream-auth` become the rule's
  `api_format` (a `messages` provider's requests and answers are translated, `gateway.formats`) and
  `key_scheme` (the header the provider key goes in, `contract.edge.PROVIDER_KEY_SCHEMES`).
- the route's `maas.opendatahub.io/max-completion-tokens` (the model's `maxCompletionTokens`) becomes the
  rule's `completion_ceiling` (None: the default; `dataplane.body.bound_completion`).
- the route's provider plan (`contract.providers.PROVIDERS_ANNOTATION`, a model with fallbacks) becomes the
  rule's `providers`: the request goes to those providers in turn (`gateway.providers`), not to the backendRef
  (the payload processor's relay, which makes the same attempts for Envoy). A plan that does not read (or
  names a refused destination) leaves the rule without backends: 500.
- an Exact, GET-only `<model path>/v1/models` rule of an ExternalModel route whose provider cannot answer OpenAI's
  listing (`contract.routing.answers_model_listing`: a Messages provider, several providers) gets the rule's
  `listing`: the answer the data plane gives there itself once the AuthPolicy admitted the caller
  (`dataplane.listing`), never the backend's.
- the one base URL is plain matching: the generated rules match `x-gateway-model-name` (Exact), which the data
  plane sets from the body's `model` (`dataplane.routing`) before it matches.

The table is immutable; the gateway rebuilds it when a watched object changes.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from maasctl.contract.edge import FORWARD_CREDENTIALS_ANNOTATION
from maasctl.contract.labels import (
    API_FORMAT_ANNOTATION,
    MODEL_ALIASES_ANNOTATION,
    MODEL_LABEL,
    MODEL_NAMESPACE_LABEL,
    PUBLISHED_MODEL_ANNOTATION,
    TARGET_MODEL_ANNOTATION,
    UPSTREAM_AUTH_ANNOTATION,
    UPSTREAM_KEY_FIELD_ANNOTATION,
    UPSTREAM_KEY_SECRET_ANNOTATION,
    completion_ceiling_of,
)
from maasctl.contract.providers import InvalidPlan, ProviderPlan, plan_of
from maasctl.contract.routing import answers_model_listing, is_model_listing_path
from maasctl.contract.windows import InvalidWindowError, duration_milliseconds
from maasctl.dataplane.body import ModelRename
from maasctl.dataplane.listing import model_list
from maasctl.gateway.config import LOCAL_URL_ANNOTATION

__all__ = [
    "Backend",
    "RouteMatch",
    "RouteRule",
    "RouteTable",
    "ServiceLookup",
    "build_route_table",
    "matches_prefix",
    "rewrite_path",
]

GATEWAY_GROUP: Final = "gateway.networking.k8s.io"
ServiceLookup = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, name) -> the cached Service, or None."""


@dataclass(frozen=True)
class Backend:
    """One resolved backendRef: where requests go and with what weight."""

    base_url: str
    weight: int
    service: str  # namespace/name, for logs


@dataclass(frozen=True)
class RouteRule:
    """One (rule, match) pair of an HTTPRoute, flattened for matching."""

    namespace: str
    route: str
    rule_index: int
    path_type: str  # Exact | PathPrefix
    path: str
    method: str | None = None
    headers: tuple[tuple[str, str, str], ...] = ()  # (lowercase name, type, value)
    hostnames: tuple[str, ...] = ()
    rewrite_prefix: str | None = None
    rewrite_full_path: str | None = None
    rewrite_hostname: str | None = None
    set_headers: tuple[tuple[str, str], ...] = ()
    add_headers: tuple[tuple[str, str], ...] = ()
    remove_headers: tuple[str, ...] = ()
    backends: tuple[Backend, ...] = ()
    backend_error: str | None = None
    timeout: float | None = None  # None: the gateway default; 0: no timeout
    upstream_key_secret: str | None = None
    forward_credentials: bool = False  # a non-model route (e.g. maas-api) that keeps the caller's credentials
    upstream_key_field: str = "api-key"
    key_scheme: str = "bearer"  # how the provider takes its key (contract.edge.PROVIDER_KEY_SCHEMES)
    api_format: str = "openai-chat"  # the provider's API; "messages": translated (gateway.formats)
    model: str | None = None  # namespace/name of the MaaSModelRef, from the route's labels
    rename: ModelRename | None = None  # published vs provider model name (ExternalModel routes)
    completion_ceiling: int | None = None  # the model's maxCompletionTokens (None: the gateway's default)
    providers: ProviderPlan | None = None  # several providers: the attempts go to these (gateway.providers)
    listing: bytes | None = None  # `GET <model path>/v1/models` answered by the data plane: this body
    created: str = ""

    @functools.cached_property
    def route_key(self) -> str:
        return f"{self.namespace}/{self.route}"

    def pick_backend(self, rng: Callable[[], float] = random.random) -> Backend | None:
        """A backend chosen by weight (None when none is usable)."""
        usable = [b for b in self.backends if b.weight > 0]
        if not usable:
            return None
        if len(usable) == 1:
            return usable[0]
        point = rng() * sum(b.weight for b in usable)
        for backend in usable:
            point -= backend.weight
            if point < 0:
                return backend
        return usable[-1]


@dataclass(frozen=True)
class RouteMatch:
    """A matched rule and the path (with query) to send upstream."""

    rule: RouteRule
    upstream_path: str


def _normalize_prefix(prefix: str) -> str:
    return prefix.rstrip("/") or "/"


def matches_prefix(prefix: str, path: str) -> bool:
    """Gateway API PathPrefix: element-wise, a trailing `/` in the prefix is ignored."""
    p = _normalize_prefix(prefix)
    return p == "/" or path == p or path.startswith(p + "/")


def rewrite_path(rule: RouteRule, path: str) -> str:
    """The upstream path of `path` (without query) after the rule's URLRewrite."""
    if rule.rewrite_full_path is not None:
        return rule.rewrite_full_path
    if rule.rewrite_prefix is None:
        return path
    matched = _normalize_prefix(rule.path)
    remainder = path if matched == "/" else path[len(matched):]
    replacement = rule.rewrite_prefix.rstrip("/")
    new = replacement + (remainder if remainder.startswith("/") or not remainder else "/" + remainder)
    return new or "/"


def _host_rank(hostnames: tuple[str, ...], host: str) -> int | None:
    """0: exact hostname match, 1: wildcard match, 2: route has no hostnames; None: no match."""
    if not hostnames:
        return 2
    best: int | None = None
    for name in hostnames:
        if name == host:
            return 0
        if name.startswith("*.") and host.endswith(name[1:]) and len(host) > len(name) - 1:
            best = 1
    return best


@dataclass
class RouteTable:
    """All rules of the served Gateway, sorted by precedence.

    Exact-path rules are indexed by their path: every generated route has four (the base-URL paths), so a
    scan over all rules would cost a request four comparisons per published model before the prefix rules.
    Exact rules precede every prefix rule (`_precedence`), so the candidates of a path in that order - the
    Exact rules of that path, then the prefix rules - give the same winner as the whole list."""

    rules: list[RouteRule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _exact: dict[str, list[RouteRule]] = field(default_factory=dict, init=False, repr=False)
    _prefix: list[RouteRule] = field(default_factory=list, init=False, repr=False)
    _relayed: dict[str, RouteRule] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rules.sort(key=_precedence)
        for rule in self.rules:
            if rule.providers is not None:
                self._relayed.setdefault(rule.route_key, rule)
            if rule.path_type == "Exact":
                self._exact.setdefault(rule.path, []).append(rule)
            else:
                self._prefix.append(rule)

    def match(self, host: str, path: str, method: str, headers: Mapping[str, str]) -> RouteMatch | None:
        """The best rule for a request (`path` without query; `headers` with lowercase names)."""
        host = host.split(":", 1)[0].lower() if not host.startswith("[") else host
        best: tuple[int, RouteRule] | None = None
        for rule in itertools.chain(self._exact.get(path, ()), self._prefix):
            rank = _host_rank(rule.hostnames, host)
            if rank is None or (best is not None and rank >= best[0]):
                continue
            if not self._matches(rule, path, method, headers):
                continue
            best = (rank, rule)
            if rank == 0:
                break
        if best is None:
            return None
        return RouteMatch(best[1], rewrite_path(best[1], path))

    @staticmethod
    def _matches(rule: RouteRule, path: str, method: str, headers: Mapping[str, str]) -> bool:
        if rule.path_type == "Exact":
            if path != rule.path:
                return False
        elif not matches_prefix(rule.path, path):
            return False
        if rule.method is not None and rule.method != method:
            return False
        for name, kind, value in rule.headers:
            got = headers.get(name)
            if got is None:
                return False
            if kind == "RegularExpression":
                if re.fullmatch(value, got) is None:
                    return False
            elif got != value:
                return False
        return True

    def relayed(self, route: str) -> RouteRule | None:
        """A rule of route `namespace/name` when it is a model with several providers (the provider relay
        follows its plan), else None."""
        return self._relayed.get(route)

    def routes(self) -> list[str]:
        """`namespace/name` of every served route (for status and simulate)."""
        return sorted({r.route_key for r in self.rules})


def _precedence(rule: RouteRule) -> tuple[Any, ...]:
    return (
        0 if rule.path_type == "Exact" else 1,
        -len(_normalize_prefix(rule.path)),
        0 if rule.method else 1,
        -len(rule.headers),
        rule.created,
        rule.route_key,
        rule.rule_index,
    )


def _attached(route: Mapping[str, Any], gateway: tuple[str, str]) -> bool:
    ns = route["metadata"].get("namespace", "")
    for ref in route.get("spec", {}).get("parentRefs") or ():
        if (
            ref.get("group", GATEWAY_GROUP) == GATEWAY_GROUP
            and ref.get("kind", "Gateway") == "Gateway"
            and ref.get("name") == gateway[0]
            and ref.get("namespace", ns) == gateway[1]
        ):
            return True
    return False


def _service_backend(svc: Mapping[str, Any], port: int | None) -> str:
    meta = svc.get("metadata", {})
    local = (meta.get("annotations") or {}).get(LOCAL_URL_ANNOTATION)
    if local:
        if not str(local).startswith(("http://", "https://")):
            raise ValueError(f"annotation {LOCAL_URL_ANNOTATION} is not an http(s) URL")
        return str(local).rstrip("/")
    spec = svc.get("spec", {})
    if spec.get("type") != "ExternalName":
        raise ValueError(
            f"Service {meta.get('namespace')}/{meta.get('name')} is not reachable locally "
            f"(annotate it with {LOCAL_URL_ANNOTATION})"
        )
    if port is None:
        raise ValueError("backendRef to a Service needs a port")
    svc_port: Mapping[str, Any] = next((p for p in spec.get("ports") or () if p.get("port") == port), {})
    tls = svc_port.get("appProtocol") == "https" or svc_port.get("name") == "https" or port == 443
    scheme = "https" if tls else "http"
    default = 443 if tls else 80
    host = str(spec.get("externalName", "")).rstrip(".")
    if not host:
        raise ValueError("ExternalName Service without externalName")
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")


def _backends(
    refs: Sequence[Mapping[str, Any]], namespace: str, services: ServiceLookup
) -> tuple[tuple[Backend, ...], str | None]:
    backends: list[Backend] = []
    errors: list[str] = []
    for ref in refs:
        group, kind = ref.get("group", ""), ref.get("kind", "Service")
        name = str(ref.get("name", ""))
        if group != "" or kind != "Service":
            errors.append(f"backend kind {group or 'core'}/{kind} {name} is not supported locally")
            continue
        if ref.get("namespace", namespace) != namespace:
            errors.append(f"cross-namespace backend {ref.get('namespace')}/{name} is not supported locally")
            continue
        svc = services(namespace, name)
        if svc is None:
            errors.append(f"Service {namespace}/{name} not found")
            continue
        try:
            base = _service_backend(svc, ref.get("port"))
        except ValueError as exc:
            errors.append(str(exc))
            continue
        backends.append(Backend(base, int(ref.get("weight", 1)), f"{namespace}/{name}"))
    if backends:
        return tuple(backends), None
    return (), "; ".join(errors) or "rule has no backendRefs"


def _timeout(rule: Mapping[str, Any]) -> float | None:
    value = (rule.get("timeouts") or {}).get("request")
    if not value:
        return None
    try:
        return duration_milliseconds(str(value)) / 1000
    except InvalidWindowError:
        return None


def _filters(rule: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in rule.get("filters") or ():
        kind = f.get("type")
        if kind == "URLRewrite":
            rewrite = f.get("urlRewrite") or {}
            out["rewrite_hostname"] = rewrite.get("hostname")
            path = rewrite.get("path") or {}
            if path.get("type") == "ReplacePrefixMatch":
                out["rewrite_prefix"] = path.get("replacePrefixMatch", "/")
            elif path.get("type") == "ReplaceFullPath":
                out["rewrite_full_path"] = path.get("replaceFullPath", "/")
        elif kind == "RequestHeaderModifier":
            mod = f.get("requestHeaderModifier") or {}
            out["set_headers"] = tuple((h["name"].lower(), h["value"]) for h in mod.get("set") or ())
            out["add_headers"] = tuple((h["name"].lower(), h["value"]) for h in mod.get("add") or ())
            out["remove_headers"] = tuple(n.lower() for n in mod.get("remove") or ())
    return out


def _rules_of(route: Mapping[str, Any], services: ServiceLookup) -> Iterable[RouteRule]:
    meta = route["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    model = None
    if labels.get(MODEL_LABEL):
        model = f"{labels.get(MODEL_NAMESPACE_LABEL, ns)}/{labels[MODEL_LABEL]}"
    rename = None
    published = annotations.get(PUBLISHED_MODEL_ANNOTATION)
    if published:
        aliases = tuple(a.strip() for a in str(annotations.get(MODEL_ALIASES_ANNOTATION) or "").split(",") if a.strip())
        rename = ModelRename(str(published), str(annotations.get(TARGET_MODEL_ANNOTATION) or published), aliases)
    spec = route.get("spec", {})
    hostnames = tuple(str(h).lower() for h in spec.get("hostnames") or ())
    rules = spec.get("rules") or [{}]
    try:
        providers, plan_error = plan_of(annotations), None
    except InvalidPlan as exc:
        providers, plan_error = None, f"provider plan: {exc}"
    api_format = str(annotations.get(API_FORMAT_ANNOTATION) or "openai-chat")
    created = str(meta.get("creationTimestamp", ""))
    listing = model_list(rename.published, model or f"{ns}/{name}", created) \
        if rename is not None and answers_model_listing(api_format, providers is not None) else None
    for index, rule in enumerate(rules):
        backends, error = _backends(rule.get("backendRefs") or (), ns, services)
        if plan_error is not None:
            backends, error = (), plan_error
        common: dict[str, Any] = {
            "namespace": ns,
            "route": name,
            "rule_index": index,
            "hostnames": hostnames,
            "backends": backends,
            "backend_error": error,
            "timeout": _timeout(rule),
            "upstream_key_secret": annotations.get(UPSTREAM_KEY_SECRET_ANNOTATION),
            "forward_credentials": annotations.get(FORWARD_CREDENTIALS_ANNOTATION) == "true"
            and not labels.get(MODEL_LABEL),
            "upstream_key_field": annotations.get(UPSTREAM_KEY_FIELD_ANNOTATION) or "api-key",
            "key_scheme": str(annotations.get(UPSTREAM_AUTH_ANNOTATION) or "bearer"),
            "api_format": api_format,
            "model": model,
            "rename": rename,
            "completion_ceiling": completion_ceiling_of(annotations),
            "providers": providers,
            "created": created,
            **_filters(rule),
        }
        for match in rule.get("matches") or [{}]:
            path = match.get("path") or {}
            path_type = path.get("type", "PathPrefix")
            if path_type not in ("Exact", "PathPrefix"):
                continue  # RegularExpression is implementation-specific; maasctl never emits it
            headers = tuple(
                (str(h["name"]).lower(), h.get("type", "Exact"), str(h["value"])) for h in match.get("headers") or ()
            )
            value, method = str(path.get("value", "/")), match.get("method")
            answered = path_type == "Exact" and method == "GET" and not headers and is_model_listing_path(value)
            yield RouteRule(
                path_type=path_type,
                path=value,
                method=method,
                headers=headers,
                listing=listing if answered else None,
                **common,
            )


def build_route_table(
    routes: Iterable[Mapping[str, Any]], services: ServiceLookup, gateway: tuple[str, str]
) -> RouteTable:
    """The table of every rule of the routes attached to `gateway` (name, namespace)."""
    rules: list[RouteRule] = []
    problems: list[str] = []
    for route in routes:
        if route["metadata"].get("deletionTimestamp") or not _attached(route, gateway):
            continue
        for rule in _rules_of(route, services):
            rules.append(rule)
            if rule.backend_error:
                problems.append(f"{rule.route_key} rule {rule.rule_index}: {rule.backend_error}")
    return RouteTable(rules, problems)
