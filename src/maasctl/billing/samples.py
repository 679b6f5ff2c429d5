"""Sample billing objects from seed 002 for `maasctl dev`, adapted to the local stack. Pure: the caller applies.

Everything lives in the Gateway's namespace (a Plan's targetRef is local, and TenantAccounts and price book
references are local to the Plan). `now` fixes the dates, so the PriceBooks give real notice: `pb-launch` (no notice
required) comes into force a minute later, `pb-standard` (the seed's rates) is announced and supersedes it 30
days later.
The sample tenants meet MaaS through organization ids: `ten-acme` is organization `acme`, the one the sample
MaaSSubscription `premium` belongs to; its BudgetPolicy `acme-monthly` notifies at 80 % of 30 USD a month and
throttles at 100 %.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from maasctl.billing.api import API_VERSION
from maasctl.billing.names import ORGANIZATION_LABEL

GATEWAY_GROUP = "gateway.networking.k8s.io"
SEED_RATES: list[dict[str, Any]] = [
    {"sku": "llama-3-70b", "unit": "per-1M-tokens",
     "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "reasoning_tokens": "10.00",
               "cached_tokens": "0.625"}},
    {"sku": "h200-mig-3g.40gb", "unit": "per-gpu-second", "rates": {"gpu_seconds": "0.001250"}},
]


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def billing_samples(namespace: str, gateway: str, now: datetime) -> list[dict[str, Any]]:
    """PriceBooks, Plans, TenantAccounts and a BudgetPolicy of the seed, attached to Gateway `namespace/gateway`."""
    meta = {"namespace": namespace}
    target = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway}
    launch = now.replace(microsecond=0)
    return [
        {"apiVersion": API_VERSION, "kind": "PriceBook", "metadata": {"name": "pb-launch", **meta},
         "spec": {"currency": "USD", "effectiveFrom": _iso(launch + timedelta(minutes=1)), "noticeDays": 0,
                  "skus": copy.deepcopy(SEED_RATES)}},
        {"apiVersion": API_VERSION, "kind": "PriceBook", "metadata": {"name": "pb-standard", **meta},
         "spec": {"currency": "USD", "effectiveFrom": _iso(launch + timedelta(days=30, hours=1)), "noticeDays": 30,
                  "supersedes": "pb-launch", "skus": copy.deepcopy(SEED_RATES),
                  "volumeTiers": [{"thresholdTokens": 1000000000, "discountPct": "8"}]}},
        {"apiVersion": API_VERSION, "kind": "Plan", "metadata": {"name": "priority", **meta},
         "spec": {"limits": {"requestsPerMinute": 600, "tokensPerMinute": 2000000, "tokensPerDay": 400000000,
                             "maxConcurrency": 64},
                  "modelScopes": ["llama-3-*", "granite-*"], "geoScopes": ["*"], "queueClass": "priority",
                  "targetRef": target, "priceBookRef": "pb-launch"}},
        {"apiVersion": API_VERSION, "kind": "Plan", "metadata": {"name": "basic", **meta},
         "spec": {"limits": {"requestsPerMinute": 30, "tokensPerMinute": 20000},
                  "modelScopes": ["gpt-*", "granite*"], "targetRef": target, "priceBookRef": "pb-launch"}},
        {"apiVersion": API_VERSION, "kind": "TenantAccount",
         "metadata": {"name": "ten-acme", "labels": {ORGANIZATION_LABEL: "acme"}, **meta},
         "spec": {"displayName": "Acme Labs", "planRef": {"name": "basic"}, "billingMode": "ShowbackOnly"}},
        {"apiVersion": API_VERSION, "kind": "TenantAccount",
         "metadata": {"name": "ten-helix", "labels": {ORGANIZATION_LABEL: "helix"}, **meta},
         "spec": {"displayName": "Helix Biotech", "planRef": {"name": "priority"}, "billingMode": "Prepaid",
                  "priceBookPin": "pb-launch",
                  "gracePolicy": {"graceAmount": "50.000000", "warningThreshold": "100.000000"}}},
        {"apiVersion": API_VERSION, "kind": "BudgetPolicy", "metadata": {"name": "acme-monthly", **meta},
         "spec": {"tenantRef": {"name": "ten-acme"}, "caps": [
             {"amount": "30", "period": "Monthly", "thresholds": [
                 {"pct": 80, "action": "Notify"}, {"pct": 100, "action": "Throttle"}]}]}},
    ]
