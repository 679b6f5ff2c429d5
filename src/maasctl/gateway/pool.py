"""What a worker process of a pool (`--workers N`, `maasctl.gateway.workers`) shares with its parent and siblings.

- `PoolState`: shared memory the parent creates and every worker maps: one byte per worker saying it is ready
  (set by the worker once it serves, cleared by the worker when it starts draining and by the parent when it
  died), one saying it was ever ready in its current incarnation, and the restarts so far. Readiness of any
  process of the pool is "every worker is ready": a dead or restarting worker makes the whole pool unready,
  never a silently smaller pool.
- `Worker`: one worker's handle on it (its index, the state, the metrics directory).
- `reuse_port_socket`: a TCP socket bound with SO_REUSEPORT, how every listener of a pool shares its port.
- `metrics_registry`: what `/metrics` exposes: this process's registry, or in a pool every worker's metrics
  (prometheus-client's multiprocess mode, the files of `metrics_dir`) plus the pool's own.
- `WORKER_REQUESTS`: requests (ext_proc streams, relay calls) each worker took, by worker index: how evenly the
  kernel spreads connections, visible to whoever is on call.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

__all__ = ["WORKER_REQUESTS", "PoolState", "Worker", "metrics_registry", "reuse_port_socket"]

WORKER_REQUESTS = Counter("maas_worker_requests_total",
                          "Requests taken by each worker process of this gateway or processor (HTTP requests, "
                          "ext_proc streams, relay calls)", ["worker"])


class PoolState:
    """Shared memory of a pool of `workers` processes (created by the parent, passed to each worker it spawns)."""

    def __init__(self, workers: int, context: Any) -> None:
        self.workers = workers
        self.ready_flags = context.RawArray("b", workers)  # 1: serving now
        self.served_flags = context.RawArray("b", workers)  # 1: was ready since its latest start
        self.restarts = context.RawValue("l", 0)

    def ready(self) -> bool:
        """Every worker serves."""
        return all(self.ready_flags)

    def ready_count(self) -> int:
        return sum(1 for flag in self.ready_flags if flag)


class _PoolCollector(Collector):
    """`maas_workers{state}` (configured, ready) and `maas_worker_restarts_total`, read from the shared state."""

    def __init__(self, state: PoolState) -> None:
        self.state = state

    def collect(self) -> Iterable[Any]:
        workers = GaugeMetricFamily("maas_workers", "Worker processes of this pool: configured, and ready now "
                                    "(fewer ready than configured fails readiness)", labels=["state"])
        workers.add_metric(["configured"], self.state.workers)
        workers.add_metric(["ready"], self.state.ready_count())
        yield workers
        restarts = CounterMetricFamily("maas_worker_restarts", "Worker processes that died and were started again")
        restarts.add_metric([], int(self.state.restarts.value))
        yield restarts


@dataclass(frozen=True)
class Worker:
    """This process is worker `index` of a pool."""

    index: int
    state: PoolState
    metrics_dir: str

    def set_ready(self, ready: bool) -> None:
        self.state.ready_flags[self.index] = 1 if ready else 0
        if ready:
            self.state.served_flags[self.index] = 1

    def pool_ready(self) -> bool:
        return self.state.ready()


def metrics_registry(state: PoolState | None, metrics_dir: str | None) -> CollectorRegistry:
    """The registry `/metrics` serves: the process's own without a pool; in a pool the sum over its workers
    (counters and histograms added, gauges as each declares: `livesum`, `livemax`) and the pool's state."""
    if state is None or metrics_dir is None:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry, metrics_dir)  # type: ignore[no-untyped-call]
    registry.register(_PoolCollector(state))
    return registry


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` with SO_REUSEPORT (port 0: a free one), not listening: the parent holds
    one per port for the pool's lifetime (the port stays the pool's while a worker restarts), each worker binds
    its own and listens on it, and the kernel spreads new connections over the listening ones."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
