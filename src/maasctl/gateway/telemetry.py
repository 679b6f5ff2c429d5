"""Per-subscription telemetry of the local data plane (seed 001 §9.1), on `/_gateway/metrics`.

- `maas_gateway_subscription_request_duration_seconds{subscription, model}`: a histogram of the latency of
  every request the gateway forwarded (from the request's arrival to the end of the answer, streams included);
- `maas_gateway_subscription_tokens_total{subscription, model, kind}`: tokens by kind (`input`, `output`,
  `total`) as metered for the usage record.

Both are labelled by the **server-selected** subscription (`namespace/name`, the one the AuthPolicy's identity
names, never a client header) and the model that served the request (`namespace/name`), so the values come
from the cluster's own objects. Cardinality is bounded twice: by the subscriptions x models that exist, and by
`max_series` - once that many distinct (subscription, model) pairs were seen, further pairs are counted under
`other`/`other` (and `maas_gateway_subscription_series_overflow_total` counts those requests). Requests refused
before reaching a model (no subscription selected) are not observed here; a mesh can do the same per
subscription from the server-set `X-MaaS-Subscription` header the AuthPolicy adds upstream.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from maasctl.contract.usage import UsageRecord

__all__ = ["MAX_SERIES", "OTHER", "SubscriptionTelemetry"]

MAX_SERIES: Final = 1000
OTHER: Final = "other"
_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

REQUEST_SECONDS = Histogram(
    "maas_gateway_subscription_request_duration_seconds",
    "Latency of forwarded requests by selected subscription and model",
    ["subscription", "model"],
    buckets=_BUCKETS,
)
TOKENS = Counter(
    "maas_gateway_subscription_tokens_total",
    "Tokens metered by selected subscription, model and kind (input, output, total)",
    ["subscription", "model", "kind"],
)
OVERFLOW = Counter(
    "maas_gateway_subscription_series_overflow_total",
    "Requests counted under subscription=other because the series bound was reached",
)

_Series = tuple[Histogram, Counter, Counter, Counter]  # duration, input, output and total tokens


class SubscriptionTelemetry:
    """Observes usage records; at most `max_series` (subscription, model) label pairs per process."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self.max_series = max_series
        # the labelled series of each admitted pair, looked up once (labels() takes a lock and builds keys every
        # call); the overflow pair is kept apart so it never counts against the bound
        self._series: dict[tuple[str, str], _Series] = {}
        self._overflow: _Series | None = None

    def _for(self, subscription: str, model: str) -> _Series:
        key = (subscription or "none", model or "none")
        series = self._series.get(key)
        if series is not None:
            return series
        if len(self._series) < self.max_series:
            series = self._series[key] = _labelled(*key)
            return series
        OVERFLOW.inc()
        if self._overflow is None:
            self._overflow = _labelled(OTHER, OTHER)
        return self._overflow

    def observe(self, record: UsageRecord) -> None:
        if not record.subscription:  # nothing was selected: not a subscription's request
            return
        seconds, input_tokens, output_tokens, total_tokens = self._for(record.subscription, record.model)
        seconds.observe(record.latency_ms / 1000.0)
        for counter, value in ((input_tokens, record.input_tokens), (output_tokens, record.output_tokens),
                               (total_tokens, record.total_tokens)):
            if value:
                counter.inc(value)



def _labelled(subscription: str, model: str) -> _Series:
    return (REQUEST_SECONDS.labels(subscription, model), TOKENS.labels(subscription, model, "input"),
            TOKENS.labels(subscription, model, "output"), TOKENS.labels(subscription, model, "total"))
