"""Prometheus metrics of the payload processor (on its metrics port). Labels are bounded: the stage (2), the
message type (6 + immediate), the refusal code (the pipeline's fixed codes) and the error kind (a few)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

__all__ = ["ERRORS", "IN_FLIGHT", "MESSAGES", "REFUSALS", "STREAMS"]

STREAMS = Counter("maas_payload_streams_total", "ext_proc streams opened", ["stage"])
IN_FLIGHT = Gauge("maas_payload_streams_in_flight", "ext_proc streams open now", ["stage"],
                  multiprocess_mode="livesum")
MESSAGES = Counter("maas_payload_messages_total", "ext_proc messages received, by type", ["stage", "type"])
REFUSALS = Counter("maas_payload_refusals_total", "Requests refused (immediate responses), by code",
                   ["stage", "code"])
ERRORS = Counter("maas_payload_errors_total",
                 "Streams ended in error (protocol misuse, stage failure, closed by Envoy mid-request)",
                 ["stage", "kind"])
