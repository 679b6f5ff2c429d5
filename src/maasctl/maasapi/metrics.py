"""Prometheus metrics of maas-api on a registry of their own (no global state shared with other
components in the same process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "maas_api_http_requests_total",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "maas_api_http_request_duration_seconds",
            "HTTP request latency by route and status",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.in_flight = Gauge("maas_api_http_requests_in_flight", "HTTP requests being served", registry=self.registry)
        self.validations = Counter(
            "maas_api_key_validation_total",
            "API key validations by result",
            ["result"],
            registry=self.registry,
        )
        self.internal_unauthenticated = Counter(
            "maas_api_internal_unauthenticated_total",
            "Calls to /internal endpoints without a valid credential, by endpoint",
            ["endpoint"],
            registry=self.registry,
        )
        self.mints = Counter("maas_api_key_mint_total", "API key mints by result", ["result"], registry=self.registry)
        self.revocations = Counter(
            "maas_api_key_revocations_total", "API keys revoked by kind", ["kind"], registry=self.registry
        )
        # The validation key cache (maasapi.keycache): lookups by result (hit, miss, not_live: the listener is
        # down and every validation reads the database), invalidations by cause, listener state and size.
        self.key_cache_lookups = Counter(
            "maas_api_key_cache_lookups_total", "Key cache lookups by result", ["result"], registry=self.registry
        )
        self.key_cache_invalidations = Counter(
            "maas_api_key_cache_invalidations_total",
            "Key cache invalidations by cause (notify, local, listener_lost, listener_started, listener_stopped)",
            ["cause"],
            registry=self.registry,
        )
        self.key_cache_listener_up = Gauge(
            "maas_api_key_cache_listener_up", "1 while the key cache's LISTEN connection is up", registry=self.registry
        )
        self.key_cache_entries = Gauge("maas_api_key_cache_entries", "Key rows held in memory", registry=self.registry)
