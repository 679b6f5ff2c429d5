"""The controller's settings: one frozen object built from flags (with MAASCTL_* fallbacks), passed down.

No other module reads the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from maasctl.contract.processor_stages import DEFAULT_BYPASS_ROUTES

DEFAULT_RELAY_PORT = 9005


def env_default(name: str, default: str) -> str:
    """Flag default taken from `MAASCTL_<NAME>` when set."""
    return os.environ.get(f"MAASCTL_{name.upper().replace('-', '_')}", default)


@dataclass(frozen=True, kw_only=True)
class ControllerSettings:
    """Everything `maasctl run` needs; defaults match the in-cluster install."""

    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    leader_election_namespace: str = "opendatahub"
    leader_election_id: str = "maas-controller.maas.opendatahub.io"
    max_concurrent_reconciles: int = 5
    log_format: str = "auto"
    log_level: str = "info"
    gateway_name: str = "maas-default-gateway"
    gateway_namespace: str = "openshift-ingress"
    # Further Gateways this controller manages (`namespace/name`): each gets the default-deny AuthPolicy, models
    # whose routes sit on them are published, and subscriptions may be bound to them (spec.gatewayRef).
    tenant_gateways: tuple[str, ...] = ()
    # Namespaces whose Services any ExternalModel may name as its endpoint (e.g. a shared model-provider
    # namespace); otherwise an ExternalModel may name only Services of its own namespace.
    provider_service_namespaces: tuple[str, ...] = ()
    subscription_namespace: str = "models-as-a-service"
    maas_api_url: str = "http://maas-api.opendatahub.svc.cluster.local:8080"
    # Subscription key cleanup Job (issue 7); it runs in `leader_election_namespace`, the controller namespace.
    cleanup_job_image: str = "quay.io/opendatahub/maasctl:latest"
    cleanup_job_service_account: str = "maas-key-cleanup"
    cleanup_job_managed_by: str = ""  # empty: the built-in Job controller; else spec.managedBy (test runner)
    cleanup_retry_base_seconds: float = 10.0
    cleanup_retry_max_seconds: float = 600.0
    # Guardrails (docs/guardrails.md): the engine image, the URL the gateway reaches the engine at (empty: the
    # engine Service's in-cluster URL) and the command that loads a configuration with the real engine before it
    # is deployed (empty: only the static checks of builders.guardrails run).
    guardrails_engine_image: str = "quay.io/opendatahub/maas-guardrails:0.24.1"
    guardrails_engine_url: str = ""
    guardrails_check_command: tuple[str, ...] = ()
    # The payload processor (docs/data-plane.md, "Envoy filter chain"): each managed Gateway gets an Istio
    # EnvoyFilter or an Envoy Gateway EnvoyExtensionPolicy calling this Service (`namespace/name`) on this port.
    # `payload_processor_fail_open` renders failure_mode_allow/failOpen (False: metering fails closed).
    # `payload_processor_bypass_routes` (`namespace/name` HTTPRoutes) never reach the processor (maas-api).
    payload_processor_wiring: bool = True
    payload_processor_service: str = "opendatahub/maas-payload-processor"
    payload_processor_port: int = 9004
    payload_processor_fail_open: bool = False
    payload_processor_bypass_routes: tuple[str, ...] = DEFAULT_BYPASS_ROUTES
    # The processor's provider relay (docs/providers.md, "Several providers for one model"): `host:port` the
    # route of an ExternalModel with fallbacks goes to; empty: the processor Service's DNS name, port 9005.
    provider_relay: str = ""

    @property
    def provider_relay_address(self) -> tuple[str, int]:
        """(host, port) of the provider relay (`provider_relay`, else the processor Service on 9005)."""
        if self.provider_relay:
            host, _, port = self.provider_relay.rpartition(":")
            return host, int(port)
        namespace, _, name = self.payload_processor_service.partition("/")
        return f"{name}.{namespace}.svc.cluster.local", DEFAULT_RELAY_PORT
