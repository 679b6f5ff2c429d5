"""What both payload-processor wirings (Istio EnvoyFilter, Envoy Gateway EnvoyExtensionPolicy) are built from.

One frozen input, its checks, the generated object's name and labels, and the two stages' processing modes:
the EnvoyFilter and the EnvoyExtensionPolicy must ask Envoy for the same messages, which the processor
(`maasctl.payload`) and the local gateway's Envoy stand-in (`payload/envoy.py`) are written against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from maasctl.builders import names
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError, check_dns_label, check_dns_subdomain
from maasctl.contract.processor_stages import DEFAULT_PROCESSOR_PORT, MODES, FilterModes, Stage

__all__ = [
    "ALLOW_MODE_OVERRIDE",
    "GRPC_STREAM_TIMEOUT",
    "MESSAGE_TIMEOUT",
    "PROCESSING_MODES",
    "WIRING_COMPONENT",
    "ProcessorWiring",
    "gateway_owner",
    "processing_mode",
    "wiring_metadata",
    "wiring_name",
]

WIRING_COMPONENT: Final = "payload-processor-wiring"
MESSAGE_TIMEOUT: Final = "30s"
"""How long Envoy waits for one answer of the processor (a buffered body may wait on a guardrails check)."""
GRPC_STREAM_TIMEOUT: Final = "300s"
"""The gRPC stream's deadline: one stream lives as long as its request, a streamed answer included."""

def _send(on: bool) -> str:
    return "SEND" if on else "SKIP"


def processing_mode(modes: FilterModes) -> dict[str, str]:
    """Envoy's ext_proc `ProcessingMode` (envoy.extensions.filters.http.ext_proc.v3) of one filter."""
    return {
        "request_header_mode": "SEND",
        "request_body_mode": modes.request_body,
        "request_trailer_mode": _send(modes.request_trailers),
        "response_header_mode": _send(modes.response_headers),
        "response_body_mode": modes.response_body,
        "response_trailer_mode": _send(modes.response_trailers),
    }


PROCESSING_MODES: Final[dict[Stage, dict[str, str]]] = {stage: processing_mode(m) for stage, m in MODES.items()}
"""Per stage, from `contract.processor_stages`' table (pre: the request only; post: everything, the response
body streamed)."""

ALLOW_MODE_OVERRIDE: Final[dict[Stage, bool]] = {stage: m.allow_mode_override for stage, m in MODES.items()}
"""Envoy's `allow_mode_override` per stage: the post stage asks for a guarded answer's body BUFFERED (its
`mode_override` in answer to the response headers), so an output guardrail's refusal keeps its own status;
every other answer streams."""


@dataclass(frozen=True)
class ProcessorWiring:
    """One managed Gateway wired to the processor Service.

    `fail_open` renders Envoy's `failure_mode_allow` / `failOpen`: False (the default) makes a processor that
    cannot be reached refuse the request, so nothing is served unmetered. `bypass_routes` are HTTPRoutes (with
    their rule count) whose traffic never goes through the processor (maas-api's own API).
    """

    gateway: GatewayRef
    gateway_uid: str
    processor: ObjectRef
    port: int = DEFAULT_PROCESSOR_PORT
    fail_open: bool = False
    bypass_routes: tuple[tuple[ObjectRef, int], ...] = ()
    cluster_domain: str = "cluster.local"

    def check(self) -> None:
        check_dns_label(self.gateway.name, "Gateway name")  # a label value on the Gateway's pods
        check_dns_label(self.gateway.namespace, "Gateway namespace")
        check_dns_label(self.processor.name, "processor Service name")
        check_dns_label(self.processor.namespace, "processor Service namespace")
        if not 1 <= self.port <= 65535:
            raise InvalidInputError(f"processor port {self.port} is not a TCP port")
        if not self.gateway_uid:
            raise InvalidInputError("the Gateway's uid is needed for the ownerReference")
        for route, rules in self.bypass_routes:
            check_dns_subdomain(route.name, "bypass HTTPRoute name")
            check_dns_label(route.namespace, "bypass HTTPRoute namespace")
            if rules < 0:
                raise InvalidInputError(f"HTTPRoute {route.key} has a negative rule count")

    @property
    def service_host(self) -> str:
        return f"{self.processor.name}.{self.processor.namespace}.svc.{self.cluster_domain}"


def wiring_name(gateway: GatewayRef) -> str:
    """`maas-payload-processor-<gateway name>`: one per Gateway (several may share a namespace)."""
    return names.truncate_name(f"maas-payload-processor-{gateway.name}")


def gateway_owner(wiring: ProcessorWiring) -> dict[str, Any]:
    """The Gateway as a non-controlling owner: garbage collection removes the wiring with its Gateway.
    No blockOwnerDeletion (that would need update rights on gateways/finalizers)."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "name": wiring.gateway.name,
            "uid": wiring.gateway_uid}


def wiring_metadata(wiring: ProcessorWiring) -> dict[str, Any]:
    return {
        "name": wiring_name(wiring.gateway),
        "namespace": wiring.gateway.namespace,
        "labels": {
            names.MANAGED_BY_LABEL: names.MANAGED_BY,
            names.PART_OF_LABEL: "maas-payload-processor",
            names.COMPONENT_LABEL: WIRING_COMPONENT,
            **names.gateway_labels(wiring.gateway),
        },
        "ownerReferences": [gateway_owner(wiring)],
    }
