"""The billing part of `maasctl dev`: install the billing CRDs, run the billing controller next to the MaaS
controller (same stop signal) and apply the seed's sample PriceBooks, Plans and TenantAccounts. Wallets and
rating are on: the ledger is `billing-ledger.db` (SQLite) in the dev directory and the rater reads maas-api's
database."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.app import run_billing
from maasctl.billing.samples import billing_samples
from maasctl.billing.settings import BillingSettings
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all

log = structlog.get_logger("maasctl.billing.dev")
FIELD_MANAGER = "maasctl-dev"


class _Options(Protocol):
    @property
    def database_url(self) -> str | None: ...


class Stack(Protocol):
    """What billing needs of the local stack (`maasctl.localstack.LocalStack`)."""

    @property
    def api(self) -> k8s.ApiClient: ...

    @property
    def directory(self) -> Path: ...

    @property
    def options(self) -> _Options: ...


async def start_billing(stack: Stack, kubeconfig: str, gateway_namespace: str, gateway_name: str,
                        stop: asyncio.Event, *, samples: bool = True,
                        settings: BillingSettings | None = None, probe_address: str = "0") -> asyncio.Task[int]:
    """Install the billing CRDs, start `maasctl billing run` in this loop (until `stop`) and apply samples."""
    await install_billing_crds(stack.api)
    ledger_url = f"sqlite+aiosqlite:///{stack.directory.joinpath('billing-ledger.db')}"
    usage_url = stack.options.database_url or f"sqlite+aiosqlite:///{stack.directory.joinpath('maas-api.db')}"
    base = settings or BillingSettings(ledger_url=ledger_url, usage_database_url=usage_url)
    settings = dataclasses.replace(base, kubeconfig=kubeconfig, metrics_bind_address=probe_address,
                                   health_probe_bind_address=probe_address)
    task = asyncio.create_task(run_billing(settings, stop), name="billing controller")
    if samples:
        client = Client(stack.api)
        await apply_all(client, billing_samples(gateway_namespace, gateway_name, datetime.now(UTC)),
                        field_manager=FIELD_MANAGER)  # the kinds were installed a moment ago
        log.info("billing samples applied", namespace=gateway_namespace,
                 hint=f"kubectl get pricebooks,plans,tenantaccounts,budgetpolicies -n {gateway_namespace}",
                 ledger=f"maasctl billing ledger --ledger-url {settings.ledger_url} show --tenant "
                 f"{gateway_namespace}/ten-helix")
    return task
