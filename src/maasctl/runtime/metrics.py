"""Prometheus metrics with controller-runtime's names and labels, on a registry owned by the manager.

Keeping the names identical to controller-runtime/client-go means existing Grafana dashboards work.
Nothing is registered globally: each ``Metrics`` holds its own ``CollectorRegistry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip
# client-go workqueue: 10ns * 10^k for 12 buckets.
_QUEUE_BUCKETS = tuple(1e-8 * 10**k for k in range(12))


class Metrics:
    """All runtime metrics, created on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_reconcile_errors_total = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", ["name", "controller"], registry=r
        )
        self.workqueue_adds_total = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_unfinished_work_seconds = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads.",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_longest_running_processor_seconds = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_oldest_due_seconds = Gauge(
            "workqueue_oldest_due_seconds",
            "How many seconds the oldest key that is due (ready, or past its delay) has waited for a worker. "
            "Growing while workers are idle means the queue stopped handing out work.",
            ["name", "controller"],
            registry=r,
        )
        self.rest_client_requests_total = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=r,
        )
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 master.",
            ["name"],
            registry=r,
        )
