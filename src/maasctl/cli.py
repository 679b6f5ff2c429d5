"""The `maasctl` command line: argument parsing only; the work lives in the modules it calls."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from maasctl import __version__
from maasctl.settings import ControllerSettings, env_default


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
                   default=env_default("leader_election_namespace", d.leader_election_namespace))
    p.add_argument("--max-concurrent-reconciles", type=int,
                   default=int(env_default("max_concurrent_reconciles", str(d.max_concurrent_reconciles))))
    p.add_argument("--log-format", choices=["auto", "json", "console"], default=env_default("log_format", "auto"))
    p.add_argument("--log-level", default=env_default("log_level", d.log_level))
    p.add_argument("--gateway-name", default=env_default("gateway_name", d.gateway_name))
    p.add_argument("--gateway-namespace", default=env_default("gateway_namespace", d.gateway_namespace))
    p.add_argument("--subscription-namespace",
                   default=env_default("subscription_namespace", d.subscription_namespace))
    p.add_argument("--maas-api-url", default=env_default("maas_api_url", d.maas_api_url))


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
        subscription_namespace=args.subscription_namespace,
        maas_api_url=args.maas_api_url,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maasctl", description="Models-as-a-Service control plane")
    parser.add_argument("--version", action="version", version=f"maasctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the controller against a cluster")
    _add_controller_flags(run)

    dev = sub.add_parser("dev", help="start a local control plane with all CRDs and run the controller on it")
    _add_controller_flags(dev)
    dev.add_argument("--dir", type=Path, default=Path(".local/dev"),
                     help="where the local control plane keeps its data and kubeconfig")

    model = sub.add_parser("testmodel", help="serve the OpenAI-compatible test model (tests and samples)")
    model.add_argument("--host", default="127.0.0.1")
    model.add_argument("--port", type=int, default=8000)
    model.add_argument("--model", dest="models", action="append", default=[], help="model id (repeatable)")
    model.add_argument("--prompt-tokens", type=int, default=10)
    model.add_argument("--completion-tokens", type=int, default=5)
    model.add_argument("--require-bearer", default=None, help="upstream key the model demands (env ok)")

    testenv = sub.add_parser("testenv", help="local control plane tooling")
    tsub = testenv.add_subparsers(dest="testenv_command", required=True)
    tsub.add_parser("build", help="build (or find in the cache) the control-plane binary and print its path")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "testenv":
        from maasctl.testenv.binary import ensure_binary

        print(ensure_binary())
        return 0

    if args.command == "testmodel":
        import uvicorn

        from maasctl.testmodel import ModelServerConfig, create_app

        cfg = ModelServerConfig(
            models=tuple(args.models) or ("test-model",),
            prompt_tokens=args.prompt_tokens,
            completion_tokens=args.completion_tokens,
            require_bearer=args.require_bearer,
        )
        uvicorn.run(create_app(cfg), host=args.host, port=args.port, log_level="warning")
        return 0

    from maasctl.logging import configure_logging

    configure_logging(fmt=args.log_format, level=args.log_level)
    if args.command == "run":
        from maasctl.app import run_controller

        return _run_async(run_controller(settings_from_args(args)))
    if args.command == "dev":
        from maasctl.dev import run_dev

        return _run_async(run_dev(settings_from_args(args), args.dir))
    raise AssertionError(args.command)


def _run_async(coro: object) -> int:
    try:
        return int(asyncio.run(coro))  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
