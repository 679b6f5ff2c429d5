"""The billing part of `maasctl dev`: install the billing CRDs, run the billing controller next to the MaaS
controller (same stop signal) and apply the seed's sample PriceBooks, Plans and TenantAccounts."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Protocol

import structlog
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.app import run_billing
from maasctl.billing.samples import billing_samples
from maasctl.billing.settings import BillingSettings
from maasctl.runtime import Client

log = structlog.get_logger("maasctl.billing.dev")
FIELD_MANAGER = "maasctl-dev"


class Stack(Protocol):
    """What billing needs of the local stack (`maasctl.localstack.LocalStack`)."""

    @property
    def api(self) -> k8s.ApiClient: ...


async def start_billing(stack: Stack, kubeconfig: str, gateway_namespace: str, gateway_name: str,
                        stop: asyncio.Event, *, samples: bool = True,
                        settings: BillingSettings | None = None) -> asyncio.Task[int]:
    """Install the billing CRDs, start `maasctl billing run` in this loop (until `stop`) and apply samples."""
    await install_billing_crds(stack.api)
    settings = dataclasses.replace(settings or BillingSettings(), kubeconfig=kubeconfig,
                                   metrics_bind_address="0", health_probe_bind_address="0")
    task = asyncio.create_task(run_billing(settings, stop), name="billing controller")
    if samples:
        client = Client(stack.api)
        for obj in billing_samples(gateway_namespace, gateway_name, datetime.now(UTC)):
            await client.apply(obj, field_manager=FIELD_MANAGER)
        log.info("billing samples applied", namespace=gateway_namespace,
                 hint=f"kubectl get pricebooks,plans,tenantaccounts -n {gateway_namespace}")
    return task
