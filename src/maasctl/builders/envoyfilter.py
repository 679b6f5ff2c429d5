"""The Istio `EnvoyFilter` that puts the payload processor into a managed Gateway's filter chain.

Two ext_proc filters on the Gateway's pods (`workloadSelector`, Istio's `gateway.networking.k8s.io/gateway-name`
label), both calling the one processor Service, told apart by the gRPC initial metadata `x-maas-stage`:

- `pre` is inserted BEFORE Kuadrant's wasm filter, so the route (and the policies Kuadrant picks by route) is
  chosen after the body's `model` became the `x-gateway-model-name` header;
- `post` is inserted AFTER it, so it sees the identity Authorino injected (`x-maas-identity`).

Kuadrant's filter has two names depending on the distribution: the WasmPlugin's
`extensions.istio.io/wasmplugin/<gateway ns>.kuadrant-<gateway>` (community Kuadrant, ODH) or a plain
`envoy.filters.http.wasm` (RHCL 1.4 patches it in with its own EnvoyFilter). Both anchor pairs are rendered;
only the one present matches. `priority: 10` makes istiod apply this after Kuadrant's EnvoyFilter (priority 0),
otherwise the `envoy.filters.http.wasm` anchor is not there yet and the patch silently does nothing.

maas-api's routes never go through the processor (per-route `ExtProcPerRoute.disabled`): key management
must not depend on the data plane, and a processor outage (fail closed) must not lock admins out. Istio names
a Gateway API route rule `<route namespace>.<route name>.<rule index>`.
"""

from __future__ import annotations

from typing import Any, Final

from maasctl.builders.payloadwiring import (
    ALLOW_MODE_OVERRIDE,
    GRPC_STREAM_TIMEOUT,
    MESSAGE_TIMEOUT,
    PROCESSING_MODES,
    ProcessorWiring,
    wiring_metadata,
)
from maasctl.builders.refs import GatewayRef
from maasctl.contract.processor_stages import STAGE_METADATA_KEY, STAGE_POST, STAGE_PRE, STAGES, Stage

__all__ = [
    "ENVOY_FILTER_API_VERSION",
    "EXT_PROC_TYPE",
    "FILTER_NAMES",
    "PRIORITY",
    "WASM_FILTER",
    "build_envoy_filter",
    "istio_route_names",
    "wasm_anchors",
]

ENVOY_FILTER_API_VERSION: Final = "networking.istio.io/v1alpha3"
PRIORITY: Final = 10
EXT_PROC_TYPE: Final = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
PER_ROUTE_TYPE: Final = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
HCM: Final = "envoy.filters.network.http_connection_manager"
WASM_FILTER: Final = "envoy.filters.http.wasm"
FILTER_NAMES: Final[dict[Stage, str]] = {
    STAGE_PRE: "envoy.filters.http.ext_proc.maas-pre",
    STAGE_POST: "envoy.filters.http.ext_proc.maas-post",
}
_OPERATION: Final[dict[Stage, str]] = {STAGE_PRE: "INSERT_BEFORE", STAGE_POST: "INSERT_AFTER"}


def wasm_anchors(gateway: GatewayRef) -> tuple[str, str]:
    """Kuadrant's wasm filter as a WasmPlugin names it, then as RHCL's own EnvoyFilter does."""
    return f"extensions.istio.io/wasmplugin/{gateway.namespace}.kuadrant-{gateway.name}", WASM_FILTER


def istio_route_names(wiring: ProcessorWiring) -> list[str]:
    """The Envoy route names of every rule of the bypass HTTPRoutes."""
    return [f"{route.namespace}.{route.name}.{index}" for route, rules in wiring.bypass_routes
            for index in range(rules)]


def _ext_proc(wiring: ProcessorWiring, stage: Stage) -> dict[str, Any]:
    port = wiring.port
    return {
        "name": FILTER_NAMES[stage],
        "typed_config": {
            "@type": EXT_PROC_TYPE,
            "failure_mode_allow": wiring.fail_open,
            "allow_mode_override": ALLOW_MODE_OVERRIDE[stage],
            "processing_mode": dict(PROCESSING_MODES[stage]),
            "grpc_service": {
                "envoy_grpc": {"cluster_name": f"outbound|{port}||{wiring.service_host}"},
                "timeout": GRPC_STREAM_TIMEOUT,
                "initial_metadata": [{"key": STAGE_METADATA_KEY, "value": stage}],
            },
            "message_timeout": MESSAGE_TIMEOUT,
        },
    }


def _insert(anchor: str, operation: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "applyTo": "HTTP_FILTER",
        "match": {"context": "GATEWAY",
                  "listener": {"filterChain": {"filter": {"name": HCM, "subFilter": {"name": anchor}}}}},
        "patch": {"operation": operation, "value": value},
    }


def _disable_on_route(route_name: str) -> dict[str, Any]:
    return {
        "applyTo": "HTTP_ROUTE",
        "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"route": {"name": route_name}}}},
        "patch": {"operation": "MERGE", "value": {"typed_per_filter_config": {
            FILTER_NAMES[stage]: {"@type": PER_ROUTE_TYPE, "disabled": True} for stage in STAGES}}},
    }


def build_envoy_filter(wiring: ProcessorWiring) -> dict[str, Any]:
    """The EnvoyFilter of `wiring.gateway` (raises InvalidInputError on names Kubernetes would refuse)."""
    wiring.check()
    patches = [_insert(anchor, _OPERATION[stage], _ext_proc(wiring, stage))
               for anchor in wasm_anchors(wiring.gateway) for stage in STAGES]
    patches += [_disable_on_route(name) for name in istio_route_names(wiring)]
    return {
        "apiVersion": ENVOY_FILTER_API_VERSION,
        "kind": "EnvoyFilter",
        "metadata": wiring_metadata(wiring),
        "spec": {
            "priority": PRIORITY,
            "workloadSelector": {"labels": {"gateway.networking.k8s.io/gateway-name": wiring.gateway.name}},
            "configPatches": patches,
        },
    }
