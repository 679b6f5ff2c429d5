"""maasctl.gateway: the local data plane, enforcing the HTTPRoutes, AuthPolicies and TokenRateLimitPolicies
the controller generates, as Envoy + Authorino + Limitador would (see `server` for the request flow).

Entry points for the CLI: `run_gateway(settings)` (`maasctl gateway`) and `simulate_remote` /
`format_report` (`maasctl simulate`).
"""

from maasctl.gateway.config import LOCAL_URL_ANNOTATION, GatewaySettings
from maasctl.gateway.server import Gateway, run_gateway, serve, start_http
from maasctl.gateway.simulate import SimulateRequest, SimulationReport, format_report, simulate, simulate_remote

__all__ = [
    "LOCAL_URL_ANNOTATION",
    "Gateway",
    "GatewaySettings",
    "SimulateRequest",
    "SimulationReport",
    "format_report",
    "run_gateway",
    "serve",
    "simulate",
    "simulate_remote",
    "start_http",
]
