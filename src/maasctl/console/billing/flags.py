"""`maasctl console` flags of the billing pages, as the billing operator renders them (contract.billing_console)."""

from __future__ import annotations

import argparse
from typing import Any

from maasctl.console.billing.settings import BillingPagesSettings
from maasctl.contract.billing_console import API_URL_FLAG, ROLE_FLAGS, TENANT_PORTAL_FLAG
from maasctl.settings import env_default


def register(parser: Any) -> None:
    p: argparse.ArgumentParser = parser
    for role, flag in ROLE_FLAGS.items():
        p.add_argument(flag, dest=f"billing_{role}_groups", action="append", default=[],
                       help=f"IdP group with the billing {role} role (repeatable; docs/billing-console.md)")
    p.add_argument("--billing-metrics-url", default=env_default("console_billing_metrics_url", "") or None,
                   help="the billing operator's /metrics (the metering health page reads the rater's lag there)")
    p.add_argument(TENANT_PORTAL_FLAG, dest="tenant_portal", action="store_true",
                   default=env_default("console_tenant_portal", "false") == "true",
                   help="serve the tenant portal at /portal")
    p.add_argument(API_URL_FLAG, default=env_default("console_billing_api_url", "") or None,
                   help="the billing operator's tenant portal API (its --portal-api-bind-address), which the "
                        "portal and the billing charts read with the signed-in user's credential")


def settings_from_args(args: argparse.Namespace) -> BillingPagesSettings:
    return BillingPagesSettings(admin_groups=tuple(args.billing_admin_groups),
                                operator_groups=tuple(args.billing_operator_groups),
                                viewer_groups=tuple(args.billing_viewer_groups),
                                metrics_url=args.billing_metrics_url, tenant_portal=args.tenant_portal,
                                api_url=args.billing_api_url)
