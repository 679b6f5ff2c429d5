"""`maasctl billing connector`: the psp-connector's flags (MAASCTL_* fallbacks, like `maasctl billing run`)."""

from __future__ import annotations

import argparse
from typing import Any

from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.settings import env_default

__all__ = ["register_connector", "run_connector_cli"]


def register_connector(sub: Any) -> None:
    d = ConnectorSettings()
    p: argparse.ArgumentParser = sub.add_parser(
        "connector", help="run the psp-connector: BillingConnectors, auto-reloads, PSP webhooks, usage/invoice sync")
    p.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None)
    p.add_argument("--namespace", dest="namespaces", action="append", default=[],
                   help="namespace to watch (repeatable; default: all namespaces)")
    p.add_argument("--ledger-url", default=env_default("billing_ledger_url", ""),
                   help="the billing ledger's database (the one `maasctl billing run` uses); required")
    p.add_argument("--webhook-bind-address", default=env_default("psp_webhook_bind_address", d.webhook_bind_address),
                   help="where the webhook receiver listens (POST /webhooks/<namespace>/<connector>)")
    p.add_argument("--service-namespace", default=env_default("psp_service_namespace", d.service_namespace),
                   help="the namespace of the connector's Service psp-connector (the pod's own): a BillingConnector "
                   "elsewhere gets an ExternalName Service naming it for its webhook Ingress")
    p.add_argument("--stripe-api-base", default=env_default("psp_stripe_api_base", d.stripe_api_base),
                   help="Stripe's API base URL (stripe-mock's in tests and maasctl dev)")
    p.add_argument("--metrics-bind-address", default=env_default("psp_metrics_bind_address", d.metrics_bind_address))
    p.add_argument("--health-probe-bind-address",
                   default=env_default("psp_health_probe_bind_address", d.health_probe_bind_address))
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                   default=env_default("leader_elect", "false") == "true")
    p.add_argument("--leader-election-namespace",
                   default=env_default("leader_election_namespace", d.leader_election_namespace))
    for flag, attr in (("--reload-check-seconds", "reload_check_seconds"),
                       ("--payment-method-cooldown-seconds", "payment_method_cooldown_seconds"),
                       ("--reload-retry-seconds", "reload_retry_seconds"),
                       ("--resume-after-seconds", "resume_after_seconds"),
                       ("--secret-check-seconds", "secret_check_seconds")):
        p.add_argument(flag, type=int, default=int(env_default(f"psp_{attr}", str(getattr(d, attr)))))
    p.add_argument("--log-format", choices=["auto", "json", "console"], default=env_default("log_format", "auto"))
    p.add_argument("--log-level", default=env_default("log_level", "info"))


def settings_from_args(args: argparse.Namespace) -> ConnectorSettings:
    return ConnectorSettings(
        kubeconfig=args.kubeconfig, namespaces=tuple(args.namespaces), ledger_url=args.ledger_url,
        webhook_bind_address=args.webhook_bind_address, service_namespace=args.service_namespace,
        stripe_api_base=args.stripe_api_base,
        metrics_bind_address=args.metrics_bind_address, health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect, leader_election_namespace=args.leader_election_namespace,
        reload_check_seconds=args.reload_check_seconds,
        payment_method_cooldown_seconds=args.payment_method_cooldown_seconds,
        reload_retry_seconds=args.reload_retry_seconds, resume_after_seconds=args.resume_after_seconds,
        secret_check_seconds=args.secret_check_seconds,
        log_format=args.log_format, log_level=args.log_level)


def run_connector_cli(args: argparse.Namespace) -> int:
    import asyncio

    from maasctl.billing.connector.app import run_connector
    from maasctl.logging import configure_logging

    configure_logging(fmt=args.log_format, level=args.log_level)
    if not args.ledger_url:
        raise SystemExit("maasctl billing connector: --ledger-url is required (the ledger payments are credited to)")
    try:
        return int(asyncio.run(run_connector(settings_from_args(args))))
    except KeyboardInterrupt:
        return 130
