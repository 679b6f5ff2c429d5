"""`maasctl billing ...`: argument parsing only (the same flag style as `maasctl run`, MAASCTL_* fallbacks)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from maasctl.billing.cli.connector import register_connector, run_connector_cli
from maasctl.billing.controller.settings import BillingSettings
from maasctl.settings import env_default

__all__ = ["dispatch", "register", "settings_from_args"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `billing run` to the CLI's subparsers."""
    billing: argparse.ArgumentParser = subparsers.add_parser("billing", help="the billing operator (seed 002)")
    sub = billing.add_subparsers(dest="billing_command", required=True)
    run = sub.add_parser("run", help="run the billing controller (PriceBooks, Plans) against a cluster")
    d = BillingSettings()
    run.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None,
                     help="kubeconfig path (default: in-cluster config, then ~/.kube/config)")
    run.add_argument("--namespace", dest="namespaces", action="append", default=[],
                     help="namespace to watch (repeatable; default: all namespaces)")
    run.add_argument("--metrics-bind-address", default=env_default("metrics_bind_address", d.metrics_bind_address),
                     help="address of the Prometheus metrics endpoint ('0' disables it)")
    run.add_argument("--health-probe-bind-address",
                     default=env_default("health_probe_bind_address", d.health_probe_bind_address),
                     help="address of /healthz and /readyz ('0' disables them)")
    run.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                     default=env_default("leader_elect", "false") == "true",
                     help="elect a leader with a coordination.k8s.io Lease before reconciling")
    run.add_argument("--leader-election-namespace",
                     default=env_default("leader_election_namespace", d.leader_election_namespace),
                     help="namespace of the leader Lease")
    run.add_argument("--max-concurrent-reconciles", type=int,
                     default=int(env_default("max_concurrent_reconciles", str(d.max_concurrent_reconciles))))
    run.add_argument("--gpu-flavor", default=env_default("billing_gpu_flavor", d.gpu_flavor),
                     help="Kueue ResourceFlavor the per-tenant ClusterQueues draw nvidia.com/gpu from")
    run.add_argument("--dependency-recheck-seconds", type=int,
                     default=int(env_default("billing_dependency_recheck_seconds",
                                             str(d.dependency_recheck_seconds))),
                     help="how often a Plan is looked at again while Kuadrant or Kueue CRDs are missing")
    run.add_argument("--ledger-url", default=env_default("billing_ledger_url", "") or None,
                     help="the ledger database (postgresql+asyncpg://... or sqlite+aiosqlite:///path); unset: no "
                     "wallets, no rating")
    run.add_argument("--usage-database-url", default=env_default("billing_usage_database_url", "") or None,
                     help="maas-api's database, read-only, where the usage records to rate are (unset: no rating)")
    run.add_argument("--rate-interval-seconds", type=int,
                     default=int(env_default("billing_rate_interval_seconds", str(d.rate_interval_seconds))),
                     help="how often the rater looks for new usage records")
    run.add_argument("--rater-stall-seconds", type=int,
                     default=int(env_default("billing_rater_stall_seconds", str(d.rater_stall_seconds))),
                     help="/readyz fails when the rater has made no progress for this long")
    run.add_argument("--gpu-meter-seconds", type=int,
                     default=int(env_default("billing_gpu_meter_seconds", str(d.gpu_meter_seconds))),
                     help="how often Kueue Workloads' GPU time is metered (also on every Workload change)")
    run.add_argument("--gpu-segment-seconds", type=int,
                     default=int(env_default("billing_gpu_segment_seconds", str(d.gpu_segment_seconds))),
                     help="a running Workload's GPU time is charged in segments at least this long")
    run.add_argument("--console-gateway-name", default=env_default("billing_console_gateway_name",
                                                                   d.console_gateway_name),
                     help="Gateway of the billing console's HTTPRoute (where the OpenShift Route API is not served)")
    run.add_argument("--console-gateway-namespace", default=env_default("billing_console_gateway_namespace",
                                                                        d.console_gateway_namespace))
    run.add_argument("--console-metrics-url", default=env_default("billing_console_metrics_url", "") or None,
                     help="this operator's /metrics as the billing console reaches it (default: the "
                          "billing-controller-metrics Service of the leader election namespace)")
    run.add_argument("--console-maas-api-url", default=env_default("billing_console_maas_api_url", "") or None,
                     help="maas-api as the billing console reaches it (default: the console's)")
    run.add_argument("--portal-api-bind-address",
                     default=env_default("billing_portal_api_bind_address", d.portal_api_bind_address),
                     help="address of the tenant portal's API (reads; admins' credits), /portal/v1 ('0', the default, "
                          "does not serve it)")
    run.add_argument("--portal-subscription-namespace",
                     default=env_default("billing_portal_subscription_namespace", d.portal_subscription_namespace),
                     help="the MaaS subscription namespace, whose MaaSSubscriptions say who belongs to which tenant")
    run.add_argument("--console-api-url", default=env_default("billing_console_api_url", "") or None,
                     help="this operator's portal API as the billing console reaches it (default: the "
                          "billing-controller-api Service of the leader election namespace)")
    run.add_argument("--log-format", choices=["auto", "json", "console"], default=env_default("log_format", "auto"))
    run.add_argument("--log-level", default=env_default("log_level", "info"))
    register_ledger(sub)
    register_rerate(sub)
    register_connector(sub)
    return billing


def register_ledger(sub: Any) -> None:
    ledger = sub.add_parser("ledger", help="a tenant's ledger entries and balance; manual credits and adjustments")
    ledger.add_argument("--ledger-url", default=env_default("billing_ledger_url", "") or None,
                        help="the ledger database (postgresql+asyncpg://... or sqlite+aiosqlite:///path)")
    cmds = ledger.add_subparsers(dest="ledger_command", required=True)
    show = cmds.add_parser("show", help="a tenant's balance and latest entries")
    show.add_argument("--tenant", required=True, help="namespace/name of the TenantAccount")
    show.add_argument("--limit", type=int, default=50)
    show.add_argument("-o", "--output", choices=["table", "json"], default="table")
    for name, what in (("credit", "add money to a tenant's wallet"),
                       ("adjust", "correct a tenant's wallet by a signed amount")):
        cmd = cmds.add_parser(name, help=what)
        cmd.add_argument("--tenant", required=True, help="namespace/name of the TenantAccount")
        cmd.add_argument("--amount", required=True, help='decimal string, e.g. "25.00" (adjust: may be negative)')
        cmd.add_argument("--reason", required=True, help="why (kept in the ledger for audit)")
        cmd.add_argument("--id", required=True, help="your id for this entry (idempotency: used once)")
        cmd.add_argument("--actor", default=os.environ.get("USER", ""), help="who (default: $USER)")
        cmd.add_argument("--currency", default="USD")
        cmd.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None,
                         help="where the TenantAccount is checked (default: in-cluster config, then $KUBECONFIG "
                              "or ~/.kube/config)")
    cmds.add_parser("verify", help="check that every transaction, and the ledger, balances")


def register_rerate(sub: Any) -> None:
    cmd = sub.add_parser("rerate", help="re-rate a tenant's usage of a period with a corrected PriceBook (adjustment "
                         "entries; the charges are never rewritten)")
    cmd.add_argument("--ledger-url", default=env_default("billing_ledger_url", "") or None,
                     help="the ledger database (postgresql+asyncpg://... or sqlite+aiosqlite:///path)")
    cmd.add_argument("--usage-database-url", default=env_default("billing_usage_database_url", "") or None,
                     help="maas-api's database (read-only): the usage records to rate again")
    cmd.add_argument("--tenant", required=True, help="namespace/name of the TenantAccount")
    cmd.add_argument("--from", dest="since", required=True, help="start of the period (ISO 8601, inclusive)")
    cmd.add_argument("--to", dest="until", required=True, help="end of the period (ISO 8601, exclusive)")
    which = cmd.add_mutually_exclusive_group(required=True)
    which.add_argument("--price-book", help="the corrected PriceBook, read from the cluster in the tenant's namespace")
    which.add_argument("--price-book-file",
                       help="the corrected PriceBook as YAML or JSON (e.g. kubectl get pricebook NAME -o yaml)")
    cmd.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None,
                     help="with --price-book: kubeconfig path (default: in-cluster config, then ~/.kube/config)")
    cmd.add_argument("--reason", required=True, help="why (kept in every adjustment entry for audit)")
    cmd.add_argument("--actor", default=os.environ.get("USER", ""), help="who (default: $USER)")
    cmd.add_argument("--geo", default=None,
                     help="region of the tenant's requests (default: the region each charge was rated in)")
    cmd.add_argument("--committed-tier", default=None,
                     help="the committed-use tier to rate the records with (default: the tier each month's fee was "
                          "charged for; none without a fee)")
    cmd.add_argument("--cost-file", action="append", default=[],
                     help="pass-through cost data for the whole period, replacing what the charges recorded: a "
                          "Secret as kubectl get secret NAME -o yaml prints it, named as costSecretRef names it "
                          "(repeatable)")
    cmd.add_argument("--dry-run", action="store_true", help="show what would change; post nothing")
    cmd.add_argument("-o", "--output", choices=["table", "json"], default="table")


def settings_from_args(args: argparse.Namespace) -> BillingSettings:
    return BillingSettings(
        kubeconfig=args.kubeconfig,
        namespaces=tuple(args.namespaces),
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        log_format=args.log_format,
        log_level=args.log_level,
        gpu_flavor=args.gpu_flavor,
        dependency_recheck_seconds=args.dependency_recheck_seconds,
        ledger_url=args.ledger_url,
        usage_database_url=args.usage_database_url,
        rate_interval_seconds=args.rate_interval_seconds,
        rater_stall_seconds=args.rater_stall_seconds,
        gpu_meter_seconds=args.gpu_meter_seconds,
        gpu_segment_seconds=args.gpu_segment_seconds,
        console_gateway_name=args.console_gateway_name,
        console_gateway_namespace=args.console_gateway_namespace,
        console_metrics_url=args.console_metrics_url,
        console_maas_api_url=args.console_maas_api_url,
        portal_api_bind_address=args.portal_api_bind_address,
        portal_subscription_namespace=args.portal_subscription_namespace,
        console_api_url=args.console_api_url,
    )


def dispatch(args: argparse.Namespace) -> int:
    """Run `maasctl billing <command>`; returns the exit code."""
    import asyncio

    if args.billing_command == "ledger":
        from maasctl.billing.cli.ledger import run_ledger

        return int(asyncio.run(run_ledger(args)))
    if args.billing_command == "rerate":
        from maasctl.billing.cli.ledger import run_rerate

        return int(asyncio.run(run_rerate(args)))
    if args.billing_command == "connector":
        return run_connector_cli(args)

    from maasctl.billing.controller.app import run_billing
    from maasctl.logging import configure_logging

    configure_logging(fmt=args.log_format, level=args.log_level)
    try:
        return int(asyncio.run(run_billing(settings_from_args(args))))
    except KeyboardInterrupt:
        return 130
