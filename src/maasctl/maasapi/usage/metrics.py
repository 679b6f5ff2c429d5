"""Prometheus metrics of usage ingestion, on the maas-api registry.

Cardinality stays bounded: labels are subscription, model and token kind; once `max_series` distinct
(subscription, model[, user]) combinations were seen, further ones are counted under `other`. A per-user
label exists only when `per_user` is switched on (settings `usage_metrics_per_user`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter

from maasctl.maasapi.usage.store import UsageEntry

OTHER = "other"
KINDS = ("input", "cached", "output", "reasoning", "total")


class UsageMetrics:
    def __init__(self, registry: CollectorRegistry, *, per_user: bool = False, max_series: int = 1000) -> None:
        self.per_user = per_user
        self.max_series = max_series
        self._seen: set[tuple[str, ...]] = set()
        labels = ["subscription", "model", *(["user"] if per_user else [])]
        self.tokens = Counter(
            "maas_usage_tokens_total",
            "Tokens metered by subscription, model and kind (input, cached, output, reasoning, total)",
            [*labels, "kind"],
            registry=registry,
        )
        self.requests = Counter(
            "maas_usage_requests_total", "Metered requests by subscription and model", labels, registry=registry
        )
        self.records = Counter(
            "maas_usage_records_total",
            "Usage records received by result (stored, duplicate, rejected)",
            ["result"],
            registry=registry,
        )
        self.rejected = Counter(
            "maas_usage_batches_rejected_total", "Usage batches rejected by error code", ["code"], registry=registry
        )

    def _labels(self, e: UsageEntry) -> tuple[str, ...]:
        key = (e.subscription or "none", e.model or "none", *((e.username or "none",) if self.per_user else ()))
        if key in self._seen:
            return key
        if len(self._seen) < self.max_series:
            self._seen.add(key)
            return key
        return tuple(OTHER for _ in key)

    def observe(self, stored: Iterable[UsageEntry], duplicates: int) -> None:
        n = 0
        for e in stored:
            n += 1
            labels = self._labels(e)
            self.requests.labels(*labels).inc()
            for kind, value in zip(
                KINDS, (e.input_tokens, e.cached_tokens, e.output_tokens, e.reasoning_tokens, e.total_tokens),
                strict=True,
            ):
                if value:
                    self.tokens.labels(*labels, kind).inc(value)
        self.records.labels("stored").inc(n)
        if duplicates:
            self.records.labels("duplicate").inc(duplicates)


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, UsageMetrics] = weakref.WeakKeyDictionary()


def for_registry(registry: CollectorRegistry, *, per_user: bool, max_series: int) -> UsageMetrics:
    """One `UsageMetrics` per registry (apps sharing a registry must not register the metrics twice)."""
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = _BY_REGISTRY[registry] = UsageMetrics(registry, per_user=per_user, max_series=max_series)
    return found
