"""Per-subscription gateway metrics: labelled by the selected subscription and model, bounded cardinality."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from maasctl.contract.usage import UsageRecord
from maasctl.gateway.telemetry import OTHER, SubscriptionTelemetry


def record(sub: str, model: str = "llm/granite", **extra: object) -> UsageRecord:
    return UsageRecord.model_validate({"timestamp": time.time(), "request_id": "r1", "subscription": sub,
                                       "model": model, "status": 200, "latency_ms": 250.0, "input_tokens": 10,
                                       "output_tokens": 5, "total_tokens": 15, **extra})


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_latency_histogram_and_token_counters_by_subscription_and_model() -> None:
    tel = SubscriptionTelemetry()
    labels = {"subscription": "maas/t-gold", "model": "llm/t-granite"}
    count = sample("maas_gateway_subscription_request_duration_seconds_count", **labels)
    tokens = sample("maas_gateway_subscription_tokens_total", **labels, kind="total")
    tel.observe(record("maas/t-gold", "llm/t-granite"))
    tel.observe(record("maas/t-gold", "llm/t-granite"))
    assert sample("maas_gateway_subscription_request_duration_seconds_count", **labels) == count + 2
    assert sample("maas_gateway_subscription_request_duration_seconds_bucket", **labels, le="0.25") >= 2
    assert sample("maas_gateway_subscription_tokens_total", **labels, kind="total") == tokens + 30
    assert sample("maas_gateway_subscription_tokens_total", **labels, kind="input") >= 20
    before = sample("maas_gateway_subscription_request_duration_seconds_count", subscription="none",
                    model="llm/t-granite")
    tel.observe(record("", "llm/t-granite"))  # nothing selected (refused before the model): not observed
    assert sample("maas_gateway_subscription_request_duration_seconds_count", subscription="none",
                  model="llm/t-granite") == before


def test_cardinality_is_bounded_and_overflow_is_counted() -> None:
    tel = SubscriptionTelemetry(max_series=3)
    overflow = sample("maas_gateway_subscription_series_overflow_total")
    for i in range(3):
        tel.observe(record(f"maas/t-bound-{i}"))
    others = sample("maas_gateway_subscription_request_duration_seconds_count", subscription=OTHER, model=OTHER)
    for i in range(3, 10):
        tel.observe(record(f"maas/t-bound-{i}"))
    tel.observe(record("maas/t-bound-0"))  # a pair seen before keeps its own labels
    assert sample("maas_gateway_subscription_request_duration_seconds_count", subscription=OTHER,
                  model=OTHER) == others + 7
    assert sample("maas_gateway_subscription_series_overflow_total") == overflow + 7
    assert sample("maas_gateway_subscription_request_duration_seconds_count", subscription="maas/t-bound-0",
                  model="llm/granite") == 2
    assert not sample("maas_gateway_subscription_request_duration_seconds_count", subscription="maas/t-bound-5",
                      model="llm/granite")
