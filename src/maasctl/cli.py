"""The `maasctl` command line: argument parsing only; the work lives in the modules it calls.

Every flag has a `MAASCTL_<FLAG>` environment fallback (see `settings.env_default`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from maasctl import __version__, keys_cli, subscription_cli, usage_cli
from maasctl.billing.cli import billing as billing_cli
from maasctl.console import cli as console_cli
from maasctl.settings import ControllerSettings, env_default


def _add_logging_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-format", choices=["auto", "json", "console"], default=env_default("log_format", "auto"))
    p.add_argument("--log-level", default=env_default("log_level", "info"))


def _add_controller_flags(p: argparse.ArgumentParser) -> None:
    d = ControllerSettings()
    p.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None,
                   help="kubeconfig path (default: in-cluster config, then ~/.kube/config)")
    p.add_argument("--namespace", dest="namespaces", action="append", default=[],
                   help="namespace to watch (repeatable; default: all namespaces)")
    p.add_argument("--metrics-bind-address", default=env_default("metrics_bind_address", d.metrics_bind_address),
                   help="address of the Prometheus metrics endpoint ('0' disables it)")
    p.add_argument("--health-probe-bind-address",
                   default=env_default("health_probe_bind_address", d.health_probe_bind_address),
                   help="address of /healthz and /readyz ('0' disables them)")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                   default=env_default("leader_elect", "false") == "true",
                   help="elect a leader with a coordination.k8s.io Lease before reconciling")
    p.add_argument("--leader-election-namespace",
                   default=env_default("leader_election_namespace", d.leader_election_namespace),
                   help="namespace of the leader Lease; also where the key cleanup Jobs run")
    p.add_argument("--max-concurrent-reconciles", type=int,
                   default=int(env_default("max_concurrent_reconciles", str(d.max_concurrent_reconciles))))
    _add_logging_flags(p)
    p.add_argument("--gateway-name", default=env_default("gateway_name", d.gateway_name))
    p.add_argument("--gateway-namespace", default=env_default("gateway_namespace", d.gateway_namespace))
    p.add_argument("--tenant-gateway", action="append", default=None, metavar="NAMESPACE/NAME",
                   help="a further Gateway this controller manages (repeatable; env MAASCTL_TENANT_GATEWAYS, "
                   "comma-separated): subscriptions may be bound to it with spec.gatewayRef")
    p.add_argument("--provider-service-namespace", dest="provider_service_namespaces", action="append",
                   default=None, metavar="NAMESPACE",
                   help="a namespace whose Services any ExternalModel may name as its endpoint (repeatable; env "
                   "MAASCTL_PROVIDER_SERVICE_NAMESPACES, comma-separated); by default only its own namespace's")
    p.add_argument("--subscription-namespace",
                   default=env_default("subscription_namespace", d.subscription_namespace))
    p.add_argument("--maas-api-url", default=env_default("maas_api_url", d.maas_api_url),
                   help="maas-api base URL used by generated AuthPolicies and cleanup Jobs")
    p.add_argument("--cleanup-job-image", default=env_default("cleanup_job_image", d.cleanup_job_image),
                   help="image of the subscription key cleanup Job (runs `maasctl keys revoke-subscription`)")
    p.add_argument("--cleanup-job-service-account",
                   default=env_default("cleanup_job_service_account", d.cleanup_job_service_account))
    p.add_argument("--cleanup-job-managed-by", default=env_default("cleanup_job_managed_by", ""),
                   help="spec.managedBy of cleanup Jobs; only for clusters without a kubelet (the local "
                        "control plane's Job runner); empty in production")
    p.add_argument("--guardrails-engine-image",
                   default=env_default("guardrails_engine_image", d.guardrails_engine_image),
                   help="image of the guardrails engine Deployment (NeMo Guardrails server)")
    p.add_argument("--guardrails-engine-url", default=env_default("guardrails_engine_url", ""),
                   help="URL the gateway calls the guardrails engine at (default: the engine Service)")
    p.add_argument("--guardrails-check-command", default=env_default("guardrails_check_command", ""),
                   help="command (split on spaces) that loads a guardrail configuration with the real engine "
                        "before it is deployed, e.g. '/opt/engine/bin/python -m maasctl_guardrails_check'")
    p.add_argument("--payload-processor-wiring", action=argparse.BooleanOptionalAction,
                   default=env_default("payload_processor_wiring", "true") == "true",
                   help="wire each managed Gateway to the payload processor (Istio EnvoyFilter or Envoy Gateway "
                   "EnvoyExtensionPolicy, whichever API the cluster serves)")
    p.add_argument("--payload-processor-service",
                   default=env_default("payload_processor_service", d.payload_processor_service),
                   metavar="NAMESPACE/NAME", help="the payload processor's Service")
    p.add_argument("--payload-processor-port", type=int,
                   default=int(env_default("payload_processor_port", str(d.payload_processor_port))))
    p.add_argument("--payload-processor-fail-open", action=argparse.BooleanOptionalAction,
                   default=env_default("payload_processor_fail_open", "false") == "true",
                   help="serve requests when the processor is unreachable (unmetered!); default: refuse them")
    p.add_argument("--payload-processor-bypass-route", dest="payload_processor_bypass_routes", action="append",
                   default=None, metavar="NAMESPACE/NAME",
                   help="an HTTPRoute whose requests skip the processor (repeatable; env "
                   "MAASCTL_PAYLOAD_PROCESSOR_BYPASS_ROUTES, comma-separated; default: opendatahub/maas-api)")
    p.add_argument("--provider-relay", default=env_default("provider_relay", ""), metavar="HOST:PORT",
                   type=_host_port, help="the payload processor's provider relay, where models with fallbacks "
                   "are routed (default: the processor Service's DNS name, port 9005)")


def _host_port(value: str) -> str:
    host, _, port = value.rpartition(":")
    if value and (not host or not port.isdigit() or not 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return value


def _tenant_gateways(flags: list[str] | None) -> tuple[str, ...]:
    values = flags if flags is not None else env_default("tenant_gateways", "").split(",")
    out = []
    for value in (v.strip() for v in values):
        if not value:
            continue
        namespace, _, name = value.partition("/")
        if not namespace or not name or "/" in name:
            raise SystemExit(f"--tenant-gateway must be NAMESPACE/NAME, not {value!r}")
        out.append(value)
    return tuple(dict.fromkeys(out))


def _bypass_routes(flags: list[str] | None) -> tuple[str, ...]:
    if flags is None:
        flags = env_default("payload_processor_bypass_routes", ",".join(
            ControllerSettings().payload_processor_bypass_routes)).split(",")
    return tuple(dict.fromkeys(v.strip() for v in flags if v.strip()))


def settings_from_args(args: argparse.Namespace) -> ControllerSettings:
    return ControllerSettings(
        kubeconfig=args.kubeconfig,
        namespaces=tuple(args.namespaces),
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        log_format=args.log_format,
        log_level=args.log_level,
        gateway_name=args.gateway_name,
        gateway_namespace=args.gateway_namespace,
        tenant_gateways=_tenant_gateways(args.tenant_gateway),
        provider_service_namespaces=tuple(v.strip() for v in (
            args.provider_service_namespaces if args.provider_service_namespaces is not None
            else env_default("provider_service_namespaces", "").split(",")) if v.strip()),
        subscription_namespace=args.subscription_namespace,
        maas_api_url=args.maas_api_url,
        cleanup_job_image=args.cleanup_job_image,
        cleanup_job_service_account=args.cleanup_job_service_account,
        cleanup_job_managed_by=args.cleanup_job_managed_by,
        guardrails_engine_image=args.guardrails_engine_image,
        guardrails_engine_url=args.guardrails_engine_url,
        guardrails_check_command=tuple(args.guardrails_check_command.split()),
        payload_processor_wiring=args.payload_processor_wiring,
        payload_processor_service=args.payload_processor_service,
        payload_processor_port=args.payload_processor_port,
        payload_processor_fail_open=args.payload_processor_fail_open,
        payload_processor_bypass_routes=_bypass_routes(args.payload_processor_bypass_routes),
        provider_relay=args.provider_relay,
    )


def _add_api_parser(sub: Any) -> None:
    api = sub.add_parser("api", help="run maas-api (API keys, model catalogue, gateway callbacks, usage)")
    api.add_argument("--host", default=env_default("api_host", "127.0.0.1"))
    api.add_argument("--port", type=int, default=int(env_default("api_port", "8080")))
    api.add_argument("--database-url", default=env_default("database_url", "sqlite+aiosqlite:///maas-api.db"),
                     help="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://...")
    api.add_argument("--subscription-namespace",
                     default=env_default("subscription_namespace", ControllerSettings().subscription_namespace))
    api.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None)
    api.add_argument("--gateway-name", default=env_default("gateway_name", ControllerSettings().gateway_name),
                     help="the controller's default Gateway: subscriptions without gatewayRef are used through it")
    api.add_argument("--gateway-namespace",
                     default=env_default("gateway_namespace", ControllerSettings().gateway_namespace))
    api.add_argument("--gateway-token-file", default=env_default("gateway_token_file", "") or None,
                     help="file with the bearer token the gateway presents on /internal/v1/* (key validation, "
                     "subscription selection, usage); none: every internal call is refused")
    api.add_argument("--gateway-url", action="append", default=None,
                     help="origin of the gateway (repeatable): the only host /v1/models probes with the caller's "
                     "credentials (env MAASCTL_GATEWAY_URL)")
    api.add_argument("--key-cleanup-user", action="append", default=None,
                     help="identity of the key cleanup Job (repeatable; default "
                     "system:serviceaccount:opendatahub:maas-key-cleanup)")
    api.add_argument("--key-cache-max-age", type=float, default=float(env_default("key_cache_max_age", "30")),
                     help="seconds a validated key row may be served from memory on PostgreSQL (invalidated at "
                     "once on any change through LISTEN/NOTIFY; this is the safety net); 0 disables the cache")
    api.add_argument("--max-active-keys-per-user", type=int,
                     default=int(env_default("max_active_keys_per_user", "100")),
                     help="active (unrevoked, unexpired) API keys one user may hold; a mint past it is 429")
    api.add_argument("--key-mints-per-minute", type=int, default=int(env_default("key_mints_per_minute", "30")),
                     help="API keys one user may mint in any minute; a mint past it is 429 with Retry-After")
    _add_logging_flags(api)


def _add_gateway_parsers(sub: Any) -> None:
    gw = sub.add_parser("gateway", help="run the local data plane enforcing the generated Gateway/Kuadrant objects")
    gw.add_argument("--host", default=env_default("gateway_host", "127.0.0.1"))
    gw.add_argument("--port", type=int, default=int(env_default("gateway_port", "8000")))
    gw.add_argument("--payload-processor", default=env_default("payload_processor", "") or None,
                    metavar="grpc://HOST:PORT",
                    help="play Envoy + Authorino + Limitador only and hand the payload stages to this processor "
                    "over gRPC (ext_proc), as in a cluster; default: every stage in process")
    gw.add_argument("--payload-processor-metrics-url", default=env_default("payload_processor_metrics_url", "")
                    or None, help="the processor's /metrics, served with the gateway's on /_gateway/metrics")
    gw.add_argument("--payload-processor-bypass-route", dest="payload_processor_bypass_routes", action="append",
                    metavar="NAMESPACE/NAME", help="an HTTPRoute served without the processor, as the controller's "
                    "flag of the same name renders it for Envoy (repeatable; default: opendatahub/maas-api)")
    _add_data_plane_flags(gw)
    pp = sub.add_parser("payload-processor",
                        help="run the payload processor (Envoy ext_proc): metering, reservation, guardrails, "
                        "provider keys, usage records")
    pp.add_argument("--host", default=env_default("payload_processor_host", "127.0.0.1"))
    pp.add_argument("--port", type=int, default=int(env_default("payload_processor_port", "9004")),
                    help="gRPC port of the ext_proc service and gRPC health")
    pp.add_argument("--metrics-port", type=int, default=int(env_default("payload_processor_metrics_port", "9090")),
                    help="HTTP port of /healthz, /readyz and /metrics")
    pp.add_argument("--relay-port", type=int, default=int(env_default("relay_port", "9005")),
                    help="HTTP port of the provider relay, where models with several providers are routed "
                    "(-1: no relay)")
    _add_data_plane_flags(pp)
    _add_simulate_parser(sub)


def _add_data_plane_flags(gw: Any) -> None:
    """The flags `maasctl gateway` and `maasctl payload-processor` share (both build GatewaySettings)."""
    gw.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None)
    gw.add_argument("--gateway-name", default=env_default("gateway_name", ControllerSettings().gateway_name))
    gw.add_argument("--gateway-namespace",
                    default=env_default("gateway_namespace", ControllerSettings().gateway_namespace))
    gw.add_argument("--subscription-namespace",
                    default=env_default("subscription_namespace", ControllerSettings().subscription_namespace),
                    help="where the MaaS admin check is asked (simulating a user needs an administrator)")
    gw.add_argument("--maas-api-url", default=env_default("gateway_maas_api_url", "") or None,
                    help="replace the origin of the policies' maas-api callback URLs (local maas-api)")
    gw.add_argument("--usage-url", default=env_default("usage_url", "") or None,
                    help="maas-api base URL receiving usage records (default: log them)")
    gw.add_argument("--usage-spool-dir", default=env_default("usage_spool_dir", "") or None,
                    help="directory where usage records wait on disk until maas-api stored them, so a killed "
                    "gateway loses none, and the in-process counters are journaled so a restart keeps them "
                    "(one per gateway process; default: memory only)")
    gw.add_argument("--maas-api-token-file", default=env_default("maas_api_token_file", "") or None,
                    help="file with the bearer token maas-api accepts from the gateway (callbacks, usage)")
    gw.add_argument("--redis-url", default=env_default("redis_url", "") or None,
                    help="token counters shared by all gateway replicas (redis://host:6379/0); default: in process")
    gw.add_argument("--guardrails-url", default=env_default("guardrails_url", "") or None,
                    help="guardrails engine base URL (default: the URL the AuthPolicy exports)")
    gw.add_argument("--provider-breaker-failures", type=int,
                    default=int(env_default("provider_breaker_failures", "5")),
                    help="a model with several providers: consecutive failures that open a provider's circuit "
                    "breaker (per process)")
    gw.add_argument("--provider-breaker-cooldown", type=float,
                    default=float(env_default("provider_breaker_cooldown", "30")),
                    help="seconds an open breaker waits before one trial request goes to the provider")
    gw.add_argument("--guardrails-stream-chunk-chars", type=int,
                    default=int(env_default("guardrails_stream_chunk_chars", "400")),
                    help="streamed answers are checked every this many characters (0: only at the end)")
    gw.add_argument("--guardrails-caller-in-flight", type=int,
                    default=int(env_default("guardrails_caller_in_flight", "4")),
                    help="guarded requests one user may have in flight on this gateway (0: unbounded; per "
                    "worker process)")
    gw.add_argument("--workers", type=int, default=int(env_default("workers", "1")),
                    help="worker processes serving the same ports (SO_REUSEPORT), at most one per core is useful; "
                    "more than 1 needs --redis-url (default 1: everything in this process)")
    _add_logging_flags(gw)


def _add_simulate_parser(sub: Any) -> None:
    sim = sub.add_parser("simulate", help="explain which subscription, policies and limits apply to a request")
    sim.add_argument("--gateway-url", default=env_default("gateway_url", "http://127.0.0.1:8000"))
    sim.add_argument("--model", required=True, help="<namespace>/<name> of the MaaSModelRef")
    who = sim.add_mutually_exclusive_group(required=True)
    who.add_argument("--key", help="an API key (sk-oai-...)")
    who.add_argument("--token", help="a Kubernetes bearer token")
    who.add_argument("--user", help="a user name (with --group)")
    sim.add_argument("--group", dest="groups", action="append", default=[])
    sim.add_argument("--subscription", help="X-MaaS-Subscription value")
    sim.add_argument("--admin-token-file", default=env_default("admin_token_file", "") or None,
                     help="file with a MaaS administrator's Kubernetes token: needed to simulate --user")
    sim.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maasctl", description="Models-as-a-Service control plane")
    parser.add_argument("--version", action="version", version=f"maasctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the controller against a cluster")
    _add_controller_flags(run)

    dev = sub.add_parser("dev", help="the whole product on a local control plane, with sample resources")
    _add_controller_flags(dev)
    dev.add_argument("--dir", type=Path, default=Path(".local/dev"),
                     help="where the local control plane keeps its data and kubeconfig")
    dev.add_argument("--gateway-port", type=int, default=8000)
    dev.add_argument("--api-port", type=int, default=8090)
    dev.add_argument("--console-port", type=int, default=8095)
    dev.add_argument("--model-port", type=int, default=0, help="the external test model's port (0: a free one)")
    dev.add_argument("--incluster-model-port", type=int, default=0,
                     help="the in-cluster test model's port (0: a free one)")
    dev.add_argument("--no-samples", action="store_true", help="do not create the sample resources")
    dev.add_argument("--billing-probe-address", default="0",
                     help="where the billing operator serves /readyz and /metrics (e.g. 127.0.0.1:8096; 0: off)")
    dev.add_argument("--payload-processor", action="store_true",
                     help="run the payload stages in a `maasctl payload-processor` process the gateway calls over "
                     "gRPC (ext_proc), as in a cluster (default: in the gateway)")

    _add_api_parser(sub)
    _add_gateway_parsers(sub)
    usage_cli.register(sub)
    subscription_cli.register(sub)
    console_cli.register(sub)
    billing_cli.register(sub)

    model = sub.add_parser("testmodel", help="serve the OpenAI-compatible test model (tests and samples)")
    model.add_argument("--host", default="127.0.0.1")
    model.add_argument("--port", type=int, default=8000)
    model.add_argument("--model", dest="models", action="append", default=[], help="model id (repeatable)")
    model.add_argument("--prompt-tokens", type=int, default=10)
    model.add_argument("--completion-tokens", type=int, default=5)
    model.add_argument("--require-bearer", default=env_default("testmodel_require_bearer", "") or None,
                       help="upstream key the model demands")
    model.add_argument("--require-api-key", default=env_default("testmodel_require_api_key", "") or None,
                       help="upstream key the Messages side (/v1/messages) demands in x-api-key")
    model.add_argument("--block-word", dest="block_words", action="append", default=[],
                       help="as a guard model: answer Yes (block) to Yes-or-No questions containing it (repeatable)")
    model.add_argument("--latency", type=float, default=0.0, metavar="SECONDS",
                       help="time each completion takes before it answers (a real model's generation time)")
    model.add_argument("--reply", dest="replies", action="append", default=[], metavar="MESSAGE=ANSWER",
                       help="answer MESSAGE with ANSWER instead of the echo (repeatable)")

    gen = sub.add_parser("gen-crds", help="regenerate the CRDs and admission policy from the pydantic models")
    gen.add_argument("--manifests", type=Path, default=Path("manifests"))
    gen.add_argument("--check", action="store_true", help="only list out-of-date files (exit 1 if any)")

    testenv = sub.add_parser("testenv", help="local control plane tooling")
    tsub = testenv.add_subparsers(dest="testenv_command", required=True)
    tsub.add_parser("build", help="build (or find in the cache) the control-plane binary and print its path")

    keys_cli.register(sub)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = _HANDLERS.get(args.command)
    if handler is None:
        raise AssertionError(args.command)
    return handler(args)


def _configure_logging(args: argparse.Namespace) -> None:
    from maasctl.logging import configure_logging

    configure_logging(fmt=getattr(args, "log_format", "auto"), level=getattr(args, "log_level", "info"))


def _run(args: argparse.Namespace) -> int:
    from maasctl.app import run_controller

    _configure_logging(args)
    return _run_async(run_controller(settings_from_args(args)))


def _dev(args: argparse.Namespace) -> int:
    from maasctl.dev import DevOptions, run_dev

    _configure_logging(args)
    return _run_async(run_dev(settings_from_args(args), DevOptions(
        directory=args.dir, gateway_port=args.gateway_port, api_port=args.api_port, console_port=args.console_port,
        model_port=args.model_port, incluster_model_port=args.incluster_model_port, samples=not args.no_samples,
        billing_probe_address=args.billing_probe_address, payload_processor=args.payload_processor)))


def _api(args: argparse.Namespace) -> int:
    from pydantic import SecretStr

    from maasctl.maasapi.server import serve
    from maasctl.maasapi.settings import MaasApiSettings

    _configure_logging(args)
    pepper = env_default("key_pepper", "")
    token = _read_secret(args.gateway_token_file)
    extra: dict[str, Any] = {"key_cleanup_users": tuple(args.key_cleanup_user)} if args.key_cleanup_user else {}
    origins = args.gateway_url or [u for u in env_default("gateway_url", "").split(",") if u]
    if origins:
        extra["gateway_origins"] = tuple(origins)
    serve(MaasApiSettings(
        host=args.host, port=args.port, database_url=args.database_url, kubeconfig=args.kubeconfig,
        subscription_namespace=args.subscription_namespace, key_pepper=SecretStr(pepper) if pepper else None,
        gateway_tokens=(SecretStr(token),) if token else (),
        default_gateway=f"{args.gateway_namespace}/{args.gateway_name}",
        key_cache_max_age=args.key_cache_max_age, max_active_keys_per_user=args.max_active_keys_per_user,
        key_mints_per_minute=args.key_mints_per_minute, **extra,
    ))
    return 0


def _data_plane_settings(args: argparse.Namespace, **extra: Any) -> Any:
    from maasctl.gateway.config import GatewaySettings

    return GatewaySettings(
        host=args.host, port=args.port, kubeconfig=args.kubeconfig, gateway_name=args.gateway_name,
        gateway_namespace=args.gateway_namespace, maas_api_url=args.maas_api_url, usage_url=args.usage_url,
        usage_spool_dir=args.usage_spool_dir, maas_api_token=_read_secret(args.maas_api_token_file),
        redis_url=args.redis_url, subscription_namespace=args.subscription_namespace,
        guardrails_url=args.guardrails_url, guardrails_stream_chunk_chars=args.guardrails_stream_chunk_chars,
        guardrails_caller_in_flight=args.guardrails_caller_in_flight,
        provider_breaker_failures=args.provider_breaker_failures,
        provider_breaker_cooldown=args.provider_breaker_cooldown, workers=args.workers,
        logging=(args.log_format, args.log_level), **extra,
    )


def _refused(settings: Any) -> bool:
    """Print why `settings` cannot run (several workers without a shared counter store, ...): True then."""
    from maasctl.gateway.config import workers_problem

    problem = workers_problem(settings)
    if problem is not None:
        print(f"maasctl: {problem}", file=sys.stderr)
    return problem is not None


def _gateway(args: argparse.Namespace) -> int:
    from maasctl.gateway.server import run_gateway

    _configure_logging(args)
    settings = _data_plane_settings(
        args, payload_processor=args.payload_processor,
        payload_processor_metrics_url=args.payload_processor_metrics_url,
        payload_processor_bypass_routes=_bypass_routes(args.payload_processor_bypass_routes))
    return 2 if _refused(settings) else _run_async(run_gateway(settings))


def _payload_processor(args: argparse.Namespace) -> int:
    from maasctl.payload.app import run_processor

    _configure_logging(args)
    relay = args.relay_port if args.relay_port >= 0 else None
    settings = _data_plane_settings(args, relay_port=relay)
    return 2 if _refused(settings) else _run_async(run_processor(settings, args.metrics_port))


def _simulate(args: argparse.Namespace) -> int:
    from maasctl.gateway.simulate import SimulateRequest, format_report, simulate_remote

    request = SimulateRequest(model=args.model, key=args.key, token=args.token, user=args.user,
                              groups=tuple(args.groups), subscription=args.subscription)
    report = asyncio.run(simulate_remote(args.gateway_url, request, admin_token=_read_secret(args.admin_token_file)))
    print(json.dumps(report.to_json(), indent=2) if args.json else format_report(report))
    return 0


def _read_secret(path: str | None) -> str | None:
    """A token from a file (tokens never travel on the command line, where `ps` shows them); a missing file
    (an optional Secret that is not there) means no token."""
    if not path or not Path(path).is_file():
        return None
    return Path(path).read_text().strip() or None


def _usage(args: argparse.Namespace) -> int:
    return _run_async(usage_cli.dispatch(args))


def _testmodel(args: argparse.Namespace) -> int:
    import uvicorn

    from maasctl.testmodel import ModelServerConfig, create_app

    cfg = ModelServerConfig(models=tuple(args.models) or ("test-model",), prompt_tokens=args.prompt_tokens,
                            completion_tokens=args.completion_tokens, require_bearer=args.require_bearer,
                            require_api_key=args.require_api_key,
                            block_words=tuple(args.block_words),
                            replies=tuple((m, a) for m, sep, a in (r.partition("=") for r in args.replies) if sep),
                            latency=max(0.0, args.latency))
    from maasctl.httpguard import HttpGuard, HttpLimits, uvicorn_options

    limits = HttpLimits()
    uvicorn.run(HttpGuard(create_app(cfg), limits), host=args.host, port=args.port, log_level="warning",
                **uvicorn_options(limits))
    return 0


def _gen_crds(args: argparse.Namespace) -> int:
    from maasctl import manifests

    if args.check:
        stale = manifests.stale_files(args.manifests)
        for rel in stale:
            print(f"out of date: {args.manifests / rel}", file=sys.stderr)
        return 1 if stale else 0
    for path in manifests.write_all(args.manifests):
        print(f"wrote {path}")
    return 0


def _testenv(args: argparse.Namespace) -> int:
    from maasctl.testenv.binary import ensure_binary

    print(ensure_binary())
    return 0


_HANDLERS = {
    "run": _run, "dev": _dev, "api": _api, "gateway": _gateway, "payload-processor": _payload_processor,
    "simulate": _simulate, "testmodel": _testmodel,
    "gen-crds": _gen_crds, "testenv": _testenv, "keys": keys_cli.run, "usage": _usage,
    "console": console_cli.run, "billing": billing_cli.dispatch, "subscription": subscription_cli.run,
}


def _run_async(coro: Coroutine[Any, Any, int]) -> int:
    from maasctl import eventloop

    try:
        return int(eventloop.run(coro))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
