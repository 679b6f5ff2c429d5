"""The seed 002 examples, verbatim (namespaces are substituted by the tests that apply them)."""

from __future__ import annotations

import copy
from typing import Any

API = "billing.opendatahub.io/v1alpha1"

PRICEBOOK: dict[str, Any] = {
    "apiVersion": API,
    "kind": "PriceBook",
    "metadata": {"name": "pb-standard"},
    "spec": {
        "currency": "USD",
        "effectiveFrom": "2026-09-01T00:00:00Z",
        "noticeDays": 30,
        "skus": [
            {"sku": "llama-3-70b", "unit": "per-1M-tokens",
             "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "reasoning_tokens": "10.00",
                       "cached_tokens": "0.625"}},
            {"sku": "h200-mig-3g.40gb", "unit": "per-gpu-second", "rates": {"gpu_seconds": "0.001250"}},
        ],
        "volumeTiers": [{"thresholdTokens": 1000000000, "discountPct": "8"}],
    },
}

PLAN: dict[str, Any] = {
    "apiVersion": API,
    "kind": "Plan",
    "metadata": {"name": "priority"},
    "spec": {
        "limits": {"requestsPerMinute": 600, "tokensPerMinute": 2000000, "tokensPerDay": 400000000,
                   "maxConcurrency": 64},
        "modelScopes": ["llama-3-*", "granite-*"],
        "geoScopes": ["*"],
        "queueClass": "priority",
        "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "billing-demo-gateway"},
        "priceBookRef": "pb-standard",
    },
}

TENANT_PREPAID: dict[str, Any] = {
    "apiVersion": API,
    "kind": "TenantAccount",
    "metadata": {"name": "ten-helix", "namespace": "platform-billing"},
    "spec": {
        "displayName": "Helix Biotech",
        "planRef": {"name": "priority"},
        "billingMode": "Prepaid",
        "pspCustomerSecretRef": {"name": "helix-stripe"},
        "billingConnectorRef": {"name": "stripe-connector"},
        "reloadPolicy": {"enabled": True, "thresholdAmount": "5000", "reloadAmount": "25000",
                         "monthlyCapAmount": "60000"},
        "gracePolicy": {"graceAmount": "50.000000", "warningThreshold": "100.000000"},
    },
}

TENANT_SHOWBACK: dict[str, Any] = {
    "apiVersion": API,
    "kind": "TenantAccount",
    "metadata": {"name": "ten-acme", "namespace": "platform-billing"},
    "spec": {"displayName": "Acme Labs", "planRef": {"name": "basic"}, "billingMode": "ShowbackOnly"},
}

CONNECTOR: dict[str, Any] = {
    "apiVersion": API,
    "kind": "BillingConnector",
    "metadata": {"name": "billingconnector-sample"},
    "spec": {"type": "stripe", "credentialsSecretRef": {"name": "stripe-credentials"}},
}

BUDGET: dict[str, Any] = {
    "apiVersion": API,
    "kind": "BudgetPolicy",
    "metadata": {"name": "helix-projects", "namespace": "platform-billing"},
    "spec": {
        "tenantRef": {"name": "ten-helix"},
        "selector": {"keyLabels": {"project": "prod-rag-pipeline"}},
        "caps": [{"amount": "30000", "period": "Monthly",
                  "thresholds": [{"pct": 80, "action": "Notify"}, {"pct": 100, "action": "Throttle"}]}],
    },
}

CONSOLE: dict[str, Any] = {
    "apiVersion": API,
    "kind": "BillingConsole",
    "metadata": {"name": "default"},
    "spec": {"enabled": True, "image": "controller:latest", "replicas": 1, "route": {"host": ""}},
}

RESERVATION_GUARANTEED: dict[str, Any] = {
    "apiVersion": API,
    "kind": "Reservation",
    "metadata": {"name": "reservation-guaranteed-sample", "namespace": "platform-billing-operator-system"},
    "spec": {"tenantRef": "acme-corp", "sku": "h200", "count": 4, "geo": "us-east",
             "window": {"start": "2026-09-01T00:00:00Z", "end": "2026-09-30T23:59:59Z"},
             "class": "Guaranteed", "monthlyPrice": "12000.000000"},
}

RESERVATION_PREEMPTIBLE: dict[str, Any] = {
    "apiVersion": API,
    "kind": "Reservation",
    "metadata": {"name": "reservation-preemptible-sample", "namespace": "platform-billing-operator-system"},
    "spec": {"tenantRef": "acme-corp", "sku": "h200-mig-3g.40gb", "count": 2, "geo": "us-east",
             "window": {"start": "2026-09-01T00:00:00Z", "end": "2026-09-07T23:59:59Z"},
             "class": "Preemptible", "monthlyPrice": "2400.000000"},
}

ALL: dict[str, dict[str, Any]] = {
    "pricebook": PRICEBOOK,
    "plan": PLAN,
    "tenant-prepaid": TENANT_PREPAID,
    "tenant-showback": TENANT_SHOWBACK,
    "connector": CONNECTOR,
    "budget": BUDGET,
    "console": CONSOLE,
    "reservation-guaranteed": RESERVATION_GUARANTEED,
    "reservation-preemptible": RESERVATION_PREEMPTIBLE,
}

# What the API server adds to each example (schema defaults).
DEFAULTS: dict[str, dict[str, Any]] = {
    "pricebook": {"providerFaultPolicy": "zero_charge", "clientDisconnectPolicy": "bill_partial"},
    "tenant-prepaid": {"gpuFreezeMode": "Drain"},
    "tenant-showback": {"gpuFreezeMode": "Drain"},
    "connector": {"taxMode": "none"},
}


def example(name: str, namespace: str | None = None) -> dict[str, Any]:
    """A deep copy of an example, moved to `namespace` (cluster-scoped kinds keep no namespace)."""
    obj = copy.deepcopy(ALL[name])
    if obj["kind"] == "BillingConsole":
        obj["metadata"].pop("namespace", None)
    elif namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return obj


def stored_spec(name: str) -> dict[str, Any]:
    """The spec the API server stores for an example: as written plus the schema defaults."""
    spec = copy.deepcopy(ALL[name]["spec"])
    spec.update(DEFAULTS.get(name, {}))
    if name == "pricebook":
        for sku in spec["skus"]:
            sku.setdefault("geo", "")
    return spec
