"""Resolve the HTTPRoute that serves a MaaSModelRef, from the cache only.

The MaaSModelRef, MaaSAuthPolicy and MaaSSubscription reconcilers all need the same answer, so it lives in
one place: for an LLMInferenceService the route KServe created, for an ExternalModel the route this controller
generates.

A KServe route is found by its labels but trusted only when the LLMInferenceService controls it (an
ownerReference with `controller: true`, its kind and uid, as KServe sets) or names it itself
(`spec.router.route.http.refs`, an existing route KServe then uses): labels are writable by whoever may create
HTTPRoutes in the namespace, and the model's AuthPolicy and TokenRateLimitPolicy attach to the route found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from maasctl.api.externalmodel import PORT_ANNOTATION, TLS_ANNOTATION, ProviderBinding
from maasctl.builders import names
from maasctl.builders.httproute import FallbackInput
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import destination_problem
from maasctl.contract.views import SubscriptionView
from maasctl.reconcilers.kinds import EXTERNAL_MODEL, GATEWAY, HTTP_ROUTE, LLM_INFERENCE_SERVICES, MAAS_MODEL_REF
from maasctl.runtime import Cache, is_deleting
from maasctl.runtime.objects import FrozenObject

KSERVE_ROUTE_LABELS = {
    "app.kubernetes.io/component": "llminferenceservice-router",
    "app.kubernetes.io/part-of": "llminferenceservice",
}


MODEL_NOT_FOUND = "NotFound"
KSERVE_API_GROUP = "serving.kserve.io"


class UnsafeDestinationError(ValueError):
    """An ExternalModel endpoint names a destination the gateway must not be sent to."""


def llm_inference_service(cache: Cache, name: str, namespace: str) -> FrozenObject | None:
    """The LLMInferenceService in whichever version the cluster serves (`v1alpha2` first, then `v1alpha1`)."""
    for gvk in LLM_INFERENCE_SERVICES:
        obj = cache.peek(gvk, name, namespace)
        if obj is not None:
            return obj
    return None


def model_alias(cache: Cache, mr: FrozenObject) -> str:
    """The name clients send in `model` for a MaaSModelRef (`status.resolvedModelAlias`): an ExternalModel's
    name; an LLMInferenceService's served model name (`status.addresses[].models[].name`, else
    `spec.model.name`), else its name; the MaaSModelRef's own name when the backend is not known yet."""
    target = (mr.get("spec") or {}).get("modelRef") or {}
    kind, name, ns = target.get("kind"), str(target.get("name") or ""), str(mr["metadata"]["namespace"])
    if kind == "ExternalModel" and name:
        return name
    if kind == "LLMInferenceService" and name:
        llm = llm_inference_service(cache, name, ns)
        if llm is None:
            return name
        for address in (llm.get("status") or {}).get("addresses") or ():
            for served in address.get("models") or ():
                if isinstance(served, Mapping) and served.get("name"):
                    return str(served["name"])[:253]
        spec_name = ((llm.get("spec") or {}).get("model") or {}).get("name")
        return str(spec_name)[:253] if spec_name else name
    return str(mr["metadata"]["name"])


@dataclass(frozen=True)
class RouteResolution:
    """Where a model is served, or why that is not known yet.

    reason: Resolved | NotFound (the MaaSModelRef, as the reference names it) | BackendNotFound | RouteNotFound |
    NotOnGateway | UnknownKind
    """

    model: ObjectRef
    reason: str
    message: str
    route: ObjectRef | None = None
    backend_ready: bool = False
    endpoint: str | None = None
    gateways: tuple[GatewayRef, ...] = ()
    external: bool = False
    managed: tuple[GatewayRef, ...] = ()
    """The route's parent Gateways this controller manages (the default one first)."""

    @property
    def resolved(self) -> bool:
        return self.route is not None

    @property
    def gateway(self) -> GatewayRef | None:
        """The managed Gateway the route is labelled with (the default one when it is among them)."""
        return self.managed[0] if self.managed else None

    @property
    def sole_gateway(self) -> GatewayRef | None:
        """The Gateway every request on this route arrives through, when the route has exactly one parent and
        this controller manages it: subscription selection can then hold a request to its tenant Gateway
        (docs/tenant-gateways.md). None when the route sits on several Gateways (managed or not: the policy
        cannot tell them apart): requests count as arriving through the default Gateway."""
        return self.managed[0] if len(self.managed) == 1 and len(set(self.gateways)) == 1 else None


def _condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return bool(cond.get("status") == "True")
    return False


def _parent_gateways(route: Mapping[str, Any]) -> tuple[GatewayRef, ...]:
    ns = route["metadata"]["namespace"]
    refs = []
    for parent in (route.get("spec") or {}).get("parentRefs") or ():
        if parent.get("kind", "Gateway") == "Gateway":
            refs.append(GatewayRef(parent.get("namespace") or ns, parent["name"]))
    return tuple(refs)


def gateway_base_url(cache: Cache, gateway: GatewayRef) -> str | None:
    """`scheme://host` clients use to reach the gateway, from its listeners or addresses."""
    gw = cache.peek(GATEWAY, gateway.name, gateway.namespace)
    if gw is None:
        return None
    for listener in (gw.get("spec") or {}).get("listeners") or ():
        host = listener.get("hostname")
        if host and "*" not in host:
            scheme = "https" if listener.get("protocol") == "HTTPS" else "http"
            return f"{scheme}://{host}"
    listeners = (gw.get("spec") or {}).get("listeners") or ()
    port = listeners[0].get("port") if listeners else None
    suffix = f":{port}" if port and port not in (80, 443) else ""
    for address in (gw.get("status") or {}).get("addresses") or ():
        if address.get("value"):
            return f"http://{address['value']}{suffix}"
    return None


def _llm_endpoint(llm: Mapping[str, Any]) -> str | None:
    status = llm.get("status") or {}
    for address in status.get("addresses") or ():
        if address.get("url"):
            return str(address["url"])
    url = status.get("url")
    return str(url) if url else None


def controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """True when `owner` is `obj`'s controller: the ownerReference with `controller: true` names its API group,
    kind, name and uid (any served version: KServe writes the version it reconciles with)."""
    meta = owner["metadata"]
    group = str(owner.get("apiVersion", "")).split("/")[0]
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") is not True:
            continue
        return bool(
            str(ref.get("apiVersion", "")).split("/")[0] == group and ref.get("kind") == owner.get("kind")
            and ref.get("name") == meta.get("name") and ref.get("uid") == meta.get("uid")
        )
    return False


def _referenced_routes(llm: Mapping[str, Any]) -> list[str]:
    """Names of the existing HTTPRoutes `llm` says serve it (`spec.router.route.http.refs`; KServe then makes
    none of its own). Named by the LLMInferenceService itself, so trusted like a route it controls."""
    spec = llm.get("spec") or {}
    http = (((spec.get("router") or {}).get("route") or {}).get("http") or {}) if isinstance(spec, Mapping) else {}
    refs = http.get("refs") if isinstance(http, Mapping) else None
    return [str(r["name"]) for r in refs or () if isinstance(r, Mapping) and r.get("name")]


def kserve_route(cache: Cache, llm: Mapping[str, Any]) -> tuple[FrozenObject | None, int]:
    """The HTTPRoute serving `llm` — labelled by KServe and controlled by `llm`, else the first existing route
    its `spec.router.route.http.refs` names — and how many labelled routes were passed over because `llm`
    neither controls nor names them."""
    meta = llm["metadata"]
    namespace = str(meta["namespace"])
    labelled = cache.list(HTTP_ROUTE, namespace,
                          labels={**KSERVE_ROUTE_LABELS, "app.kubernetes.io/name": str(meta["name"])})
    named = _referenced_routes(llm)
    owned = [r for r in labelled if controlled_by(r, llm)]
    foreign = sum(1 for r in labelled if not controlled_by(r, llm) and r["metadata"]["name"] not in named)
    if owned:
        return min(owned, key=lambda r: str(r["metadata"]["name"])), foreign
    referenced = (cache.get(HTTP_ROUTE, name, namespace) for name in named)
    return next((r for r in referenced if r is not None), None), foreign


def _route_not_found(model: ObjectRef, name: str, foreign: int) -> RouteResolution:
    if not foreign:
        return RouteResolution(model, "RouteNotFound", f"waiting for the HTTPRoute of LLMInferenceService {name}")
    return RouteResolution(
        model, "RouteNotFound",
        f"waiting for the HTTPRoute of LLMInferenceService {name}: {foreign} HTTPRoute(s) carry its KServe labels "
        f"but it neither controls them (an ownerReference with controller: true and its uid) nor names them "
        f"(spec.router.route.http.refs), so they are ignored",
    )


def _managed(parents: tuple[GatewayRef, ...], managed: tuple[GatewayRef, ...]) -> tuple[GatewayRef, ...]:
    return tuple(gw for gw in managed if gw in parents)


def resolve(cache: Cache, model: ObjectRef, gateway: GatewayRef,
            tenant_gateways: tuple[GatewayRef, ...] = ()) -> RouteResolution:
    """The route of `model` and whether its backend is ready, from cached objects only. `gateway` is the
    default Gateway, `tenant_gateways` the further ones this controller manages: a KServe route attached to
    none of them is `NotOnGateway`."""
    managed = (gateway, *(t for t in tenant_gateways if t != gateway))
    mr = cache.peek(MAAS_MODEL_REF, model.name, model.namespace)
    if mr is None or is_deleting(mr):
        return RouteResolution(model, MODEL_NOT_FOUND, f"MaaSModelRef {model.key} not found")
    target = (mr.get("spec") or {}).get("modelRef") or {}
    kind, name = target.get("kind"), target.get("name", "")
    if kind == "ExternalModel":
        em = cache.peek(EXTERNAL_MODEL, name, model.namespace)
        if em is None:
            return RouteResolution(model, "BackendNotFound", f"ExternalModel {model.namespace}/{name} not found",
                                   external=True)
        route_name = names.external_route_name(model.name)
        route = cache.peek(HTTP_ROUTE, route_name, model.namespace)
        if route is None:
            return RouteResolution(model, "RouteNotFound", f"HTTPRoute {route_name} not generated yet",
                                   external=True)
        on = _managed(_parent_gateways(route), managed)
        base = gateway_base_url(cache, on[0] if on else gateway)
        prefix = f"/{model.namespace}/{model.name}/v1"
        return RouteResolution(
            model, "Resolved", "route generated", ObjectRef(model.namespace, route_name), backend_ready=True,
            endpoint=(base or "") + prefix, gateways=_parent_gateways(route), external=True, managed=on,
        )
    if kind == "LLMInferenceService":
        llm = llm_inference_service(cache, name, model.namespace)
        if llm is None:
            return RouteResolution(model, "BackendNotFound",
                                   f"LLMInferenceService {model.namespace}/{name} not found")
        route, foreign = kserve_route(cache, llm)
        if route is None:
            return _route_not_found(model, name, foreign)
        gateways = _parent_gateways(route)
        route_ref = ObjectRef(model.namespace, str(route["metadata"]["name"]))
        on = _managed(gateways, managed)
        if not on:
            names_ = ", ".join(gw.key for gw in managed)
            return RouteResolution(
                model, "NotOnGateway",
                f"HTTPRoute {route_ref.key} is not attached to Gateway {names_}",
                gateways=gateways,
            )
        return RouteResolution(
            model, "Resolved", "route found", route_ref, backend_ready=_condition_true(llm, "Ready"),
            endpoint=_llm_endpoint(llm), gateways=gateways, managed=on,
        )
    return RouteResolution(model, "UnknownKind", f"unsupported modelRef kind {kind!r}")


def tenant_gateway_problem(res: RouteResolution, tenant: GatewayRef, default: GatewayRef,
                           managed: tuple[GatewayRef, ...]) -> str | None:
    """Why a subscription bound to `tenant` cannot use the resolved model `res` (None: it can).

    Selection holds a request to the Gateway the model's AuthPolicy names: the route's only managed Gateway
    when that is a tenant one, else the default Gateway (see `RouteResolution.sole_gateway`)."""
    if tenant not in managed:
        return f"Gateway {tenant.key} is not managed by this controller (--tenant-gateway)"
    arrives_through = res.sole_gateway or default
    if arrives_through == tenant:
        return None
    where = res.route.key if res.route is not None else res.model.key
    if tenant in res.managed:
        return (f"HTTPRoute {where} is attached to several Gateways: requests on it count as arriving through "
                f"the default Gateway, not the subscription's tenant Gateway {tenant.key}")
    return f"HTTPRoute {where} is not attached to the subscription's tenant Gateway {tenant.key}"


def subscription_gateway_problem(res: RouteResolution, sub: SubscriptionView, default: GatewayRef,
                                 managed: tuple[GatewayRef, ...]) -> str | None:
    """`tenant_gateway_problem` for the Gateway `sub` is bound to (spec.gatewayRef, else `default`)."""
    return tenant_gateway_problem(res, GatewayRef.parse(sub.tenant_gateway(default.key)), default, managed)


def split_endpoint(url: str) -> tuple[str, int, bool, str]:
    """(host, port, tls, base path) of a provider base URL such as `https://api.example.com/v1`."""
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    return parts.hostname or "", port, tls, parts.path or "/"


HOST_FORM_BASE_PATH = "/v1"


def provider_endpoint(endpoint: str, annotations: Mapping[str, str] | None,
                      namespace: str | None = None, shared: tuple[str, ...] = ()) -> tuple[str, int, bool, str]:
    """(host, port, tls, base path) of an ExternalModel's `spec.endpoint`: a base URL as is; a host name alone
    (the reference's form) is https on 443 with base path `/v1` unless `maas.opendatahub.io/tls: "false"`
    (then http, port 80) or `maas.opendatahub.io/port` say otherwise. Raises ValueError for bad annotations and
    UnsafeDestinationError for a host the gateway must not be sent to (`validation.destination_problem`;
    `namespace`, the ExternalModel's, enables the rule on other namespaces' Services; `shared` namespaces'
    Services are allowed to all)."""
    parsed = _endpoint_parts(endpoint, annotations)
    problem = destination_problem(parsed[0], namespace, shared)
    if problem is not None:
        raise UnsafeDestinationError(f"endpoint host {parsed[0][:300]!r} {problem}")
    return parsed


def fallback_input(binding: ProviderBinding, namespace: str, shared: tuple[str, ...] = ()) -> FallbackInput:
    """A fallback provider (`spec.fallbacks[]`) resolved like the first one's endpoint (host form: https, 443,
    `/v1`; the port and TLS annotations are the first provider's only). Raises as `provider_endpoint`, naming
    the fallback."""
    try:
        host, port, tls, base = provider_endpoint(str(binding.endpoint), None, namespace, shared)
    except UnsafeDestinationError as exc:
        raise UnsafeDestinationError(f"fallback {binding.name}: {exc}") from exc
    ref = binding.credential_ref
    return FallbackInput(
        name=binding.name, provider=binding.provider, host=host, port=port, tls=tls, base_path=base,
        target_model=binding.target_model, api_format=binding.api_format or "openai-chat",
        credential_secret=ref.name if ref else None, credential_key=ref.key if ref else "api-key",
        weight=1 if binding.weight is None else binding.weight)


def _endpoint_parts(endpoint: str, annotations: Mapping[str, str] | None) -> tuple[str, int, bool, str]:
    """`provider_endpoint` before the destination check."""
    if "://" in endpoint:
        host, port, tls, base = split_endpoint(endpoint)
        return host.rstrip("."), port, tls, base
    notes = annotations or {}
    tls_text = str(notes.get(TLS_ANNOTATION, "true")).strip().lower()
    if tls_text not in ("true", "false"):
        raise ValueError(f'annotation {TLS_ANNOTATION} must be "true" or "false", not {tls_text[:32]!r}')
    tls = tls_text == "true"
    port_text = str(notes.get(PORT_ANNOTATION, "443" if tls else "80")).strip()
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"annotation {PORT_ANNOTATION} must be a port number 1-65535, not {port_text[:32]!r}")
    return endpoint.lower().rstrip("."), int(port_text), tls, HOST_FORM_BASE_PATH
