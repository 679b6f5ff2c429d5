"""HTTPRoute (`gateway.networking.k8s.io/v1`) and backend Service for a MaaSModelRef of kind ExternalModel.

A provider outside the cluster is reached through an ExternalName Service (the backend kind every Gateway API
implementation we target resolves, and the one upstream MaaS uses). The route:

- attaches to the configured Gateway (`parentRefs` name/namespace);
- matches `PathPrefix <prefix>/v1`, where `<prefix>` defaults to `/<model namespace>/<model name>`, and
  rewrites that prefix to the provider's base path (`/v1` for `https://host/v1`, `/openai/v1`, or `/`), so
  `/<ns>/<model>/v1/chat/completions` reaches `https://host/v1/chat/completions`;
- rewrites `Host` to the provider host (`urlRewrite.hostname`; needed for TLS SNI and virtual hosting);
- removes the caller's credentials (`CALLER_CREDENTIAL_HEADERS`) with a `RequestHeaderModifier`: the endpoint
  is chosen by a namespace admin, so a caller's MaaS key, token or cookie must never reach it. Envoy applies the
  route filter itself; the local data plane drops the same headers anyway and injects the provider key after
  the route's filters (`contract.edge.upstream_headers`), so the key still arrives there;
- bounds the request with `timeouts.request` (default 300s);
- serves the one base URL too (`contract.routing`): one rule per base path (`/v1/chat/completions`,
  `/v1/completions`, `/v1/embeddings`, `/v1/responses`, `/v1/messages`, path Exact) that also matches the header
  `x-gateway-model-name: <published model name>` (or the MaaSModelRef's name, an alias) and rewrites the full
  path to the provider's (`ReplaceFullPath`: Gateway API allows `ReplacePrefixMatch` only on PathPrefix
  matches). The data plane sets that header from the body's `model`; clients never may. Every rule is part of
  the same HTTPRoute, so the model's AuthPolicy and TokenRateLimitPolicy (which target the route) cover them.

The provider host must be a destination the gateway may be sent to (`validation.check_destination`: no
link-local or numeric-trick addresses, no API server, no other namespace's Services).

The model name: clients send the published name (the ExternalModel's name, `status.resolvedModelAlias`); the
provider expects `targetModel`. The route carries both (`maas.opendatahub.io/published-model`,
`maas.opendatahub.io/target-model`, plus the MaaSModelRef's name as an alias) and the gateway rewrites the
request body's `model` to the provider's name and the answer's back (`dataplane.body.ModelRename`); the label
`maas.opendatahub.io/external-model` names the ExternalModel.

The completion ceiling (`MaaSModelRef.spec.maxCompletionTokens`) rides on the route as the annotation
`maas.opendatahub.io/max-completion-tokens` when the model sets it (`contract.labels.completion_ceiling_of`
reads it); absent, the data plane uses its default and forwards bodies unchanged.

The Messages door (`/v1/messages`, Anthropic's API, for Anthropic clients): the base URL's `/v1/messages` rule
and an Exact `<prefix>/messages` rule (it wins over the PathPrefix rule) go to the path the provider answers it
at: `<base>/chat/completions` for an OpenAI provider, `<base>/messages` for a `messages` one; the data plane
translates (docs/providers.md).

A `messages` (Anthropic) provider (`apiFormat`, annotation `maas.opendatahub.io/api-format`) is served as OpenAI
chat completions and through the door, nothing else: its route's rules are `<prefix>/chat/completions`,
`<prefix>/messages` (Exact) and the base URL's two paths, all rewritten in full to the provider's
`<base>/messages`; the data plane translates the request and the answer. Other OpenAI paths have no Messages
counterpart and find no route (404), but for `GET <prefix>/models` (Exact, GET only), which the data plane
answers itself after the AuthPolicy (`contract.routing.answers_model_listing`, `dataplane.listing`): maas-api's
`/v1/models` probes it with the caller's credential to list the model. How the provider takes its key rides on the
route as `maas.opendatahub.io/upstream-auth` (`contract.edge.key_scheme_for`: `x-api-key` for `messages`,
`api-key` for Azure, `bearer` otherwise).

The upstream key stays in its Secret: the route carries only the Secret's *name* (annotation
`maas.opendatahub.io/upstream-key-secret`) and the Secret gets the `maas.opendatahub.io/upstream-key` label
(`upstream_key_secret_patch`), so the gateway component that injects keys can find it. No key value is ever
part of a generated object.

TLS: the Service port is named `https` with `appProtocol: https` when the provider is reached over TLS; data
planes that originate TLS by port/app protocol (and the local gateway) use it.

Several providers (`fallbacks`, docs/providers.md "Several providers for one model"): Envoy calls ext_proc once
per request and its retries cannot change the key, the format or the body, so the route of such a model goes to
the payload processor's provider relay (`relay`: an ExternalName Service naming the relay's Service, plain
http), which makes the attempts. The route then serves chat completions and the Messages door only (own path and
base URL, Exact), all rewritten in full to the relay's `/v1/chat/completions`, and `GET <prefix>/models`, which
the data plane answers as for a `messages` provider; every caller credential is removed
(the relay sets each provider's key itself); the providers ride on the route as the plan
(`contract.providers.PROVIDERS_ANNOTATION`: names, base URLs, model names, formats, key schemes, Secret names,
weights - never a key). The local gateway reads the plan and makes the same attempts in process. Every
provider host goes through the same destination rule as a single provider's.

Both objects live in the MaaSModelRef's namespace, so they may carry a controller ownerReference to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from maasctl.api._fields import has_unsafe_chars
from maasctl.builders import names
from maasctl.builders.refs import GatewayRef, ObjectRef, OwnerRef
from maasctl.builders.validation import (
    InvalidInputError,
    check_destination,
    check_dns_label,
    check_dns_subdomain,
    check_hostname,
    check_path,
)
from maasctl.contract import identity as ids
from maasctl.contract.edge import PROVIDER_KEY_SCHEMES, key_scheme_for
from maasctl.contract.labels import (
    API_FORMAT_ANNOTATION,
    API_FORMATS,
    COMPLETION_CEILING_ANNOTATION,
    MAX_COMPLETION_CEILING,
    UPSTREAM_AUTH_ANNOTATION,
)
from maasctl.contract.providers import (
    MAX_PROVIDERS,
    PROVIDERS_ANNOTATION,
    RELAY_PATH,
    ProviderPlan,
    ProviderTarget,
    encode_plan,
)
from maasctl.contract.routing import BASE_INFERENCE_PATHS, MODEL_HEADER, MODELS_LISTING_PATH, answers_model_listing
from maasctl.contract.windows import is_valid_duration

__all__ = [
    "API_VERSION",
    "CALLER_CREDENTIAL_HEADERS",
    "KIND",
    "ExternalRouteInput",
    "FallbackInput",
    "RelayTarget",
    "build_external_model_objects",
    "build_external_route",
    "build_external_service",
    "provider_plan",
    "public_path_prefix",
    "upstream_key_secret_patch",
]

API_VERSION: Final = "gateway.networking.k8s.io/v1"
KIND: Final = "HTTPRoute"
PART_OF: Final = "maas-model"
COMPONENT_ROUTE: Final = "external-model-route"
COMPONENT_SERVICE: Final = "external-model-backend"
# What a caller authenticates with; never for the provider (the same set as contract.edge.CREDENTIAL_HEADERS).
CALLER_CREDENTIAL_HEADERS: Final = ("authorization", "x-api-key", "api-key", "cookie", "proxy-authorization")


@dataclass(frozen=True)
class FallbackInput:
    """A further provider of the model (ExternalModel `spec.fallbacks[]`), its endpoint resolved."""

    name: str
    provider: str
    host: str
    target_model: str
    port: int = 443
    tls: bool = True
    base_path: str = "/v1"
    api_format: str = "openai-chat"
    credential_secret: str | None = None
    credential_key: str = "api-key"
    weight: int = 1


@dataclass(frozen=True)
class RelayTarget:
    """Where the payload processor's provider relay listens (its Service's DNS name, or 127.0.0.1 locally)."""

    host: str
    port: int = 9005


@dataclass(frozen=True)
class ExternalRouteInput:
    """A MaaSModelRef of kind ExternalModel, resolved against its ExternalModel.

    `external_model` is the ExternalModel's name (the published model name), `target_model` the provider's
    model name (None: the same as the published one).
    `host` is the provider FQDN, `base_path` the provider's OpenAI-compatible base path (what `/v1` maps to),
    `credential_secret` the name of the Secret with the provider key (same namespace; None = no key).
    `path_prefix` overrides `/<model ns>/<model name>`. `owner` is the MaaSModelRef, for ownerReferences.
    """

    model: ObjectRef
    external_model: str
    host: str
    gateway: GatewayRef
    port: int = 443
    tls: bool = True
    base_path: str = "/v1"
    path_prefix: str | None = None
    timeout: str = "300s"
    hostnames: tuple[str, ...] = ()
    credential_secret: str | None = None
    credential_key: str = "api-key"
    owner: OwnerRef | None = None
    target_model: str | None = None
    shared_service_namespaces: tuple[str, ...] = ()  # whose Services any ExternalModel may name (operator's choice)
    max_completion_tokens: int | None = None  # MaaSModelRef.spec.maxCompletionTokens (None: the default)
    processor_sets_authorization: bool = False  # the payload processor removes the caller's and sets the key
    provider: str = ""  # ExternalModel.spec.provider (Azure takes its key in `api-key`)
    api_format: str = "openai-chat"  # ExternalModel.spec.apiFormat: openai-chat | messages
    weight: int = 1  # spec.weight (Weighted selection)
    fallbacks: tuple[FallbackInput, ...] = ()  # spec.fallbacks: further providers (the route goes to `relay`)
    provider_selection: str = "Ordered"  # spec.providerSelection: Ordered | Weighted
    max_attempts: int | None = None  # spec.maxAttempts (None: every provider with a weight)
    relay: RelayTarget | None = None  # the provider relay; needed with fallbacks

    @property
    def relayed(self) -> bool:
        """Several providers: the route goes to the provider relay."""
        return bool(self.fallbacks)


def public_path_prefix(inp: ExternalRouteInput) -> str:
    """The path clients call, up to and including `/v1`."""
    prefix = inp.path_prefix if inp.path_prefix is not None else f"/{inp.model.namespace}/{inp.model.name}"
    return check_path(prefix.rstrip("/") + "/v1", "path prefix")


def _base_path(inp: ExternalRouteInput) -> str:
    path = inp.base_path.strip() or "/"
    if not path.startswith("/"):
        path = "/" + path
    path = path.rstrip("/") or "/"
    return check_path(path, "provider base path")


def _metadata(inp: ExternalRouteInput, name: str, component: str) -> dict[str, Any]:
    labels = names.model_labels(inp.model, PART_OF, component)
    labels[names.EXTERNAL_MODEL_LABEL] = names.label_value(inp.external_model)
    meta: dict[str, Any] = {"name": name, "namespace": inp.model.namespace, "labels": labels}
    if inp.owner is not None:
        meta["ownerReferences"] = [inp.owner.to_dict()]
    return meta


def _validate(inp: ExternalRouteInput) -> None:
    check_dns_subdomain(inp.model.name, "MaaSModelRef name")
    check_dns_label(inp.model.namespace, "MaaSModelRef namespace")
    check_hostname(inp.host, "provider host")
    check_destination(inp.host, inp.model.namespace, "provider host", inp.shared_service_namespaces)
    check_dns_subdomain(inp.gateway.name, "Gateway name")
    check_dns_subdomain(inp.external_model, "ExternalModel name")
    target = inp.target_model
    if target is not None and (not target or len(target) > 253 or has_unsafe_chars(target)):
        raise InvalidInputError(f"target model {target!r} is not a usable model name")
    check_dns_label(inp.gateway.namespace, "Gateway namespace")
    for hostname in inp.hostnames:
        check_hostname(hostname.removeprefix("*."), "route hostname")
    if inp.credential_secret is not None:
        check_dns_subdomain(inp.credential_secret, "credential Secret name")
    if isinstance(inp.port, bool) or not 1 <= inp.port <= 65535:
        raise InvalidInputError(f"port {inp.port!r} is not 1-65535")
    if not is_valid_duration(inp.timeout):
        raise InvalidInputError(f"timeout {inp.timeout!r} is not a Gateway API duration")
    ceiling = inp.max_completion_tokens
    if ceiling is not None and (isinstance(ceiling, bool) or not 1 <= ceiling <= MAX_COMPLETION_CEILING):
        raise InvalidInputError(f"maxCompletionTokens {ceiling!r} is not 1-{MAX_COMPLETION_CEILING}")
    if inp.api_format not in API_FORMATS:
        raise InvalidInputError(f"apiFormat {inp.api_format!r} is not one of {', '.join(API_FORMATS)}")
    if inp.relayed:
        _validate_fallbacks(inp)


def _validate_fallbacks(inp: ExternalRouteInput) -> None:
    if inp.relay is None:
        raise InvalidInputError("a model with fallbacks needs the provider relay's address")
    check_hostname(inp.relay.host, "provider relay host")
    if not 1 <= inp.relay.port <= 65535:
        raise InvalidInputError(f"provider relay port {inp.relay.port!r} is not 1-65535")
    if len(inp.fallbacks) > MAX_PROVIDERS - 1:
        raise InvalidInputError(f"at most {MAX_PROVIDERS - 1} fallbacks")
    names_ = [inp.provider, *(f.name for f in inp.fallbacks)]
    if len(set(names_)) != len(names_):
        raise InvalidInputError("provider names repeat (spec.provider and fallbacks[].name)")
    for f in inp.fallbacks:
        check_dns_label(f.name, "fallback name")
        check_hostname(f.host, f"fallback {f.name} host")
        check_destination(f.host, inp.model.namespace, f"fallback {f.name} host", inp.shared_service_namespaces)
        if not f.target_model or len(f.target_model) > 253 or has_unsafe_chars(f.target_model):
            raise InvalidInputError(f"fallback {f.name} target model {f.target_model!r} is not a usable model name")
        if f.api_format not in API_FORMATS:
            raise InvalidInputError(f"fallback {f.name} apiFormat {f.api_format!r} is not one of "
                                    f"{', '.join(API_FORMATS)}")
        if isinstance(f.port, bool) or not 1 <= f.port <= 65535:
            raise InvalidInputError(f"fallback {f.name} port {f.port!r} is not 1-65535")
        if f.credential_secret is not None:
            check_dns_subdomain(f.credential_secret, f"fallback {f.name} credential Secret name")
        if not 0 <= f.weight <= 100:
            raise InvalidInputError(f"fallback {f.name} weight {f.weight!r} is not 0-100")
    if not 0 <= inp.weight <= 100 or not any(w > 0 for w in (inp.weight, *(f.weight for f in inp.fallbacks))):
        raise InvalidInputError("at least one provider needs a weight above 0 (each 0-100)")
    if inp.provider_selection not in ("Ordered", "Weighted"):
        raise InvalidInputError(f"providerSelection {inp.provider_selection!r} is not Ordered or Weighted")
    if inp.max_attempts is not None and not 1 <= inp.max_attempts <= 1 + len(inp.fallbacks):
        raise InvalidInputError(f"maxAttempts {inp.max_attempts!r} is not 1 to the number of providers")


def _url(host: str, port: int, tls: bool, base_path: str) -> str:
    default = 443 if tls else 80
    authority = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{authority}{'' if port == default else f':{port}'}" + \
        (base_path.rstrip("/") if base_path != "/" else "")


def provider_plan(inp: ExternalRouteInput) -> ProviderPlan:
    """The route's provider plan: the first provider (the ExternalModel's own fields), then the fallbacks."""
    first = ProviderTarget(
        name=inp.provider, base_url=_url(inp.host, inp.port, inp.tls, _base_path(inp)),
        target_model=inp.target_model or inp.external_model, api_format=inp.api_format,
        key_scheme=key_scheme_for(inp.provider, inp.api_format), secret=inp.credential_secret,
        secret_key=inp.credential_key, weight=inp.weight)
    rest = tuple(ProviderTarget(
        name=f.name, base_url=_url(f.host, f.port, f.tls, check_path(f.base_path.rstrip("/") or "/", "base path")),
        target_model=f.target_model, api_format=f.api_format, key_scheme=key_scheme_for(f.provider, f.api_format),
        secret=f.credential_secret, secret_key=f.credential_key, weight=f.weight) for f in inp.fallbacks)
    enabled = sum(1 for p in (first, *rest) if p.weight > 0)
    return ProviderPlan((first, *rest), "weighted" if inp.provider_selection == "Weighted" else "ordered",
                        inp.max_attempts or enabled)


def build_external_service(inp: ExternalRouteInput) -> dict[str, Any]:
    """The ExternalName Service the route's backendRef points at."""
    _validate(inp)
    scheme = "https" if inp.tls and not inp.relayed else "http"
    host, port = (inp.relay.host, inp.relay.port) if inp.relay is not None and inp.relayed else (inp.host, inp.port)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(inp, names.external_service_name(inp.model.name), COMPONENT_SERVICE),
        "spec": {
            "type": "ExternalName",
            "externalName": host,
            "ports": [{"name": scheme, "port": port, "protocol": "TCP", "appProtocol": scheme}],
        },
    }


def _strip_caller_credentials(keep: str | None) -> dict[str, Any]:
    """The filter that keeps a caller's credentials from the provider on data planes that forward every header
    the route does not remove (Envoy); the local data plane drops them regardless. The same filter removes
    `x-maas-identity`, which Authorino adds for the payload processor: should the processor be bypassed (not
    wired, or failing open), the caller's identity still does not reach a provider.

    `keep`: the header the provider key goes in, when the Gateway's payload processor is certainly in the path
    and fails closed (`reconcilers.processorwiring.processor_owns_credentials`). Envoy applies this filter in
    the router, after ext_proc, so removing that header would also remove the provider key the processor set
    in its place (it removes the caller's own value itself); every other caller credential is still removed."""
    remove = [h for h in CALLER_CREDENTIAL_HEADERS if h != keep]
    remove.append(ids.HEADER)  # the caller's identity, for the processor only (it removes it too)
    return {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": remove}}


def _upstream_path(base: str, api_path: str) -> str:
    """The provider's path for a base-URL path: `/v1/chat/completions` under base `/openai/v1` is
    `/openai/v1/chat/completions` (base `/`: `/chat/completions`)."""
    return base.rstrip("/") + api_path.removeprefix("/v1")


def _model_names(inp: ExternalRouteInput) -> list[str]:
    """What the body's `model` may say on the base URL: the published name, and the MaaSModelRef's name."""
    return [inp.external_model] + ([inp.model.name] if inp.model.name != inp.external_model else [])


def _rule(inp: ExternalRouteInput, matches: list[dict[str, Any]], path_rewrite: dict[str, Any]) -> dict[str, Any]:
    relay = inp.relay if inp.relayed else None
    # the relay sets each provider's key itself: every caller credential goes, whoever is in the path
    keep = PROVIDER_KEY_SCHEMES[key_scheme_for(inp.provider, inp.api_format)] \
        if inp.processor_sets_authorization and relay is None else None
    return {
        "matches": matches,
        "filters": [
            {"type": "URLRewrite", "urlRewrite": {"hostname": relay.host if relay else inp.host,
                                                  "path": path_rewrite}},
            _strip_caller_credentials(keep),
        ],
        "backendRefs": [
            {
                "group": "",
                "kind": "Service",
                "name": names.external_service_name(inp.model.name),
                "port": relay.port if relay else inp.port,
                "weight": 1,
            }
        ],
        "timeouts": {"request": inp.timeout},
    }


CHAT_PATH: Final = "/v1/chat/completions"
MESSAGES_PATH: Final = "/v1/messages"


def _model_header_matches(inp: ExternalRouteInput, api_path: str) -> list[dict[str, Any]]:
    return [{"path": {"type": "Exact", "value": api_path},
             "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": name}]} for name in _model_names(inp)]


def _full_path(path: str) -> dict[str, Any]:
    return {"type": "ReplaceFullPath", "replaceFullPath": path}


def _provider_path(inp: ExternalRouteInput, api_path: str) -> str:
    """The provider's path for a client's API path: a `messages` provider takes chat completions and the
    Messages door at `<base>/messages`; an OpenAI one takes the Messages door at `<base>/chat/completions` (the
    data plane translates), everything else at the same path under its base."""
    base = _base_path(inp)
    if inp.api_format == "messages":
        return _upstream_path(base, MESSAGES_PATH)
    return _upstream_path(base, CHAT_PATH if api_path == MESSAGES_PATH else api_path)


def _base_url_rules(inp: ExternalRouteInput) -> list[dict[str, Any]]:
    """One rule per base path, matched with the model header (see the module docstring)."""
    if inp.relayed:  # chat completions and the door, both to the relay's one path
        return [_rule(inp, _model_header_matches(inp, api_path), _full_path(RELAY_PATH))
                for api_path in (CHAT_PATH, MESSAGES_PATH)]
    paths = (CHAT_PATH, MESSAGES_PATH) if inp.api_format == "messages" else BASE_INFERENCE_PATHS
    return [_rule(inp, _model_header_matches(inp, api_path), _full_path(_provider_path(inp, api_path)))
            for api_path in paths]


def _listing_rule(inp: ExternalRouteInput, prefix: str) -> dict[str, Any]:
    """`GET <prefix>/models` (Exact, GET only) of a model whose provider cannot answer OpenAI's listing
    (`contract.routing.answers_model_listing`): the data plane answers it after the AuthPolicy, naming the
    published model (`dataplane.listing`). Its rewrite is where it would go were the payload processor not in
    the path: the relay's one path (the relay refuses it: no token, or not a POST) or a Messages provider's own
    listing without a key (refused): the model is then not listed, as it cannot be served either."""
    target = RELAY_PATH if inp.relayed else _upstream_path(_base_path(inp), MODELS_LISTING_PATH)
    match = {"path": {"type": "Exact", "value": prefix + MODELS_LISTING_PATH.removeprefix("/v1")}, "method": "GET"}
    return _rule(inp, [match], _full_path(target))


def _own_path_rules(inp: ExternalRouteInput) -> list[dict[str, Any]]:
    """The model's own path: everything under `<prefix>/v1` as the provider has it, and the Messages door
    (Exact: it wins over the prefix) to the path the provider answers it at. A `messages` provider or several
    providers: chat completions and the door only, and the model listing the data plane answers."""
    prefix = public_path_prefix(inp)
    listing = [_listing_rule(inp, prefix)] if answers_model_listing(inp.api_format, inp.relayed) else []
    if inp.relayed:
        return [*(_rule(inp, [{"path": {"type": "Exact", "value": prefix + api_path.removeprefix("/v1")}}],
                        _full_path(RELAY_PATH)) for api_path in (CHAT_PATH, MESSAGES_PATH)), *listing]
    door = _rule(inp, [{"path": {"type": "Exact", "value": prefix + MESSAGES_PATH.removeprefix("/v1")}}],
                 _full_path(_provider_path(inp, MESSAGES_PATH)))
    if inp.api_format == "messages":
        chat = _rule(inp, [{"path": {"type": "Exact", "value": prefix + CHAT_PATH.removeprefix("/v1")}}],
                     _full_path(_provider_path(inp, CHAT_PATH)))
        return [chat, door, *listing]
    everything = _rule(inp, [{"path": {"type": "PathPrefix", "value": prefix}}],
                       {"type": "ReplacePrefixMatch", "replacePrefixMatch": _base_path(inp)})
    return [everything, door, *listing]


def build_external_route(inp: ExternalRouteInput) -> dict[str, Any]:
    """The HTTPRoute publishing the external model on the gateway."""
    _validate(inp)
    meta = _metadata(inp, names.external_route_name(inp.model.name), COMPONENT_ROUTE)
    annotations = {
        names.PUBLISHED_MODEL_ANNOTATION: inp.external_model,
        names.TARGET_MODEL_ANNOTATION: inp.target_model or inp.external_model,
    }
    if inp.model.name != inp.external_model:
        annotations[names.MODEL_ALIASES_ANNOTATION] = inp.model.name
    if inp.max_completion_tokens is not None:
        annotations[COMPLETION_CEILING_ANNOTATION] = str(inp.max_completion_tokens)
    if inp.relayed:  # the keys, formats and schemes are the plan's, per provider
        annotations[PROVIDERS_ANNOTATION] = encode_plan(provider_plan(inp))
    else:
        if inp.credential_secret is not None:
            annotations[names.UPSTREAM_KEY_SECRET_ANNOTATION] = inp.credential_secret
            annotations[names.UPSTREAM_KEY_FIELD_ANNOTATION] = inp.credential_key
        if inp.api_format != "openai-chat":
            annotations[API_FORMAT_ANNOTATION] = inp.api_format
        scheme = key_scheme_for(inp.provider, inp.api_format)
        if scheme != "bearer":
            annotations[UPSTREAM_AUTH_ANNOTATION] = scheme
    meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "name": inp.gateway.name,
                "namespace": inp.gateway.namespace,
            }
        ],
        "rules": [*_own_path_rules(inp), *_base_url_rules(inp)],
    }
    if inp.hostnames:
        spec["hostnames"] = sorted(set(inp.hostnames))
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def build_external_model_objects(inp: ExternalRouteInput) -> list[dict[str, Any]]:
    """Service first, then the route (apply in this order)."""
    return [build_external_service(inp), build_external_route(inp)]


def upstream_key_secret_patch(inp: ExternalRouteInput) -> dict[str, Any] | None:
    """A server-side-apply patch that only labels the credential Secret (its data is never touched or read)."""
    if inp.credential_secret is None:
        return None
    check_dns_subdomain(inp.credential_secret, "credential Secret name")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": inp.credential_secret,
            "namespace": inp.model.namespace,
            # Only the shared label: one Secret may serve several models, and per-model labels would make
            # their applies overwrite each other forever.
            "labels": {names.UPSTREAM_KEY_LABEL: "true"},
        },
    }
