"""Sample billing objects from seed 002 for `maasctl dev`, adapted to the local stack. Pure: the caller applies.

Everything lives in the Gateway's namespace (a Plan's targetRef is local, and TenantAccounts and price book
references are local to the Plan). `now` fixes the dates, so the PriceBooks give real notice: `pb-launch` (no notice
required) comes into force a minute later, `pb-standard` (the seed's rates) is announced and supersedes it 30
days later.
The sample tenants meet MaaS through organization ids: `ten-acme` is organization `acme`, the one the sample
MaaSSubscription `premium` belongs to; its BudgetPolicy `acme-monthly` notifies at 80 % of 30 USD a month and
throttles at 100 %.

Both books also price the dev stack's two models (`llm/gpt-x`, `llm/granite`, by their names), with a per-request
rate so that a handful of calls moves money: a call of gpt-x (10 prompt + 5 completion tokens, the test model's
answer) costs 0.050075 USD. `ten-acme` is Prepaid with auto-reload through BillingConnector `stripe-dev` (Stripe,
i.e. stripe-mock in `maasctl dev`, with the test keys of `payment_secrets`): `maasctl dev` credits it 1.00 USD
at start, and whenever the balance is below 0.90 the psp-connector reloads 1.00.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from maasctl.billing.api import API_VERSION
from maasctl.billing.rules.names import ORGANIZATION_LABEL

GATEWAY_GROUP = "gateway.networking.k8s.io"
SEED_RATES: list[dict[str, Any]] = [
    {"sku": "llama-3-70b", "unit": "per-1M-tokens",
     "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "reasoning_tokens": "10.00",
               "cached_tokens": "0.625"}},
    {"sku": "h200-mig-3g.40gb", "unit": "per-gpu-second", "rates": {"gpu_seconds": "0.001250"}},
]


MODEL_RATES: list[dict[str, Any]] = [
    {"sku": "gpt-x", "unit": "per-1M-tokens",
     "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "requests": "0.05"}},
    {"sku": "granite", "unit": "per-1M-tokens",
     "rates": {"prompt_tokens": "0.60", "completion_tokens": "0.60", "requests": "0.02"}},
]
GPT_X_CALL, GRANITE_CALL = "0.050075", "0.020009"  # 10 prompt + 5 completion tokens and one request
PAYING_TENANT = "ten-acme"
DEV_CONNECTOR = "stripe-dev"
DEV_CREDENTIALS, DEV_CARD = "stripe-dev-keys", "acme-card"
DEV_WEBHOOK_SECRET = "whsec_maasctl_dev_sample"  # stripe-mock's test mode: not a secret of anything real
WELCOME_CREDIT, RELOAD_THRESHOLD, RELOAD_AMOUNT = "1.00", "0.90", "1.00"


def payment_secrets(namespace: str) -> list[dict[str, Any]]:
    """The sample connector's Stripe test keys (stripe-mock accepts any `sk_test_<letters and digits>` key, no
    underscore after the prefix) and ten-acme's customer."""
    def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                "type": "Opaque", "stringData": data}

    return [secret(DEV_CREDENTIALS, {"secretKey": "sk_test_maasctldev", "webhookSecret": DEV_WEBHOOK_SECRET}),
            secret(DEV_CARD, {"customerId": "cus_maasctl_dev_acme", "defaultPaymentMethodId": "pm_card_visa"})]


def without_payments(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without references to the sample connector (when no PSP runs): the tenant keeps its wallet."""
    if obj["kind"] != "TenantAccount":
        return obj
    out = copy.deepcopy(obj)
    for key in ("billingConnectorRef", "pspCustomerSecretRef", "reloadPolicy"):
        out["spec"].pop(key, None)
    return out


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
                  "skus": copy.deepcopy(SEED_RATES + MODEL_RATES)}},
        {"apiVersion": API_VERSION, "kind": "PriceBook", "metadata": {"name": "pb-standard", **meta},
         "spec": {"currency": "USD", "effectiveFrom": _iso(launch + timedelta(days=30, hours=1)), "noticeDays": 30,
                  "supersedes": "pb-launch", "skus": copy.deepcopy(SEED_RATES + MODEL_RATES),
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
         "spec": {"displayName": "Acme Labs", "planRef": {"name": "basic"}, "billingMode": "Prepaid",
                  "billingConnectorRef": {"name": DEV_CONNECTOR}, "pspCustomerSecretRef": {"name": DEV_CARD},
                  "reloadPolicy": {"enabled": True, "thresholdAmount": RELOAD_THRESHOLD,
                                   "reloadAmount": RELOAD_AMOUNT, "monthlyCapAmount": "100.00",
                                   "maxReloadsPerDay": 50}}},
        {"apiVersion": API_VERSION, "kind": "BillingConnector", "metadata": {"name": DEV_CONNECTOR, **meta},
         "spec": {"type": "stripe", "credentialsSecretRef": {"name": DEV_CREDENTIALS},
                  "webhookIngress": {"host": "psp-connector.localhost"},
                  "sync": {"usageRecordsInterval": "1m", "invoiceInterval": "1h"}}},
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
