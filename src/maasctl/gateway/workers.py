"""Several worker processes on the same ports: `maasctl gateway --workers N`, `maasctl payload-processor --workers N`.

Why: one Python process spends 1-1.5 ms of CPU on each request (BENCHMARKS.md), so one process is bound by one
core; N processes use N.

How (docs/data-plane.md, "Worker processes"):

- **One port, SO_REUSEPORT.** The parent binds each listening port with SO_REUSEPORT and never listens on it
  (it accepts nothing; it keeps the port the pool's while a worker restarts, and picks the port once when 0 is
  asked); every worker binds the same port with SO_REUSEPORT and listens, and the kernel spreads new
  connections over the workers' sockets. Chosen over one socket inherited by every worker because grpcio can
  only serve an address it binds itself (no API takes a listening descriptor) and binds with SO_REUSEPORT by
  default, while uvicorn serves any socket it is given: one mechanism for the gateway's HTTP port, the
  processor's gRPC port and its relay. The balance is per connection: a long-lived connection (Envoy's HTTP/2
  connections to the processor, one per Envoy worker thread; a client's keep-alive connection) stays on one
  worker, and connections still waiting in a dying worker's accept queue are reset.
- **Spawned, not forked.** Each worker is a fresh interpreter (multiprocessing's spawn): grpcio does not
  survive a fork after its threads started, and a fork would copy per-process random values (the request-id
  prefix, the process's relay secret). What must be equal in every worker comes from the parent: the
  settings, and a relay secret when there is no gateway token.
- **Shared counters.** Token and request limits are counted in Redis (`--redis-url` is required: per-process
  counters would let every limit through N times; `config.workers_problem`).
- **A spool per worker.** Worker i spools in `<spool>/worker-<i>` (`gateway.spool`); the parent holds the
  root's lock, moves what a run with another worker count left into the workers' directories before it
  starts them, and a worker started again after a kill recovers its directory: no record is lost.
- **Metrics.** prometheus-client's multiprocess mode: each worker writes its values to files in a directory
  the parent creates (`PROMETHEUS_MULTIPROC_DIR`), and `/metrics` (whichever worker answers, or the processor's
  parent) serves their sum, so one scrape target per pod stays one. Gauges declare how they add up
  (`livesum`, `livemax`); a dead worker's gauges are dropped, its counters kept.
- **Readiness reflects every worker** (`pool.PoolState`): a worker that dies is started again by the parent
  (at once if it had served, else after a backoff up to 30 s), and until it is ready again every readiness
  endpoint of the pool answers 503. A worker that dies before it was ever ready at its first start is a
  configuration problem: the pool stops and the parent exits 1, as one process would.
- **Shutdown.** SIGTERM (or SIGINT) to the parent: each worker gets SIGTERM, turns unready, stops accepting,
  lets in-flight requests finish (uvicorn's graceful 5 s, gRPC's 5 s) and flushes its usage records (what
  maas-api cannot take now stays in its spool); the parent waits up to `grace` seconds (then SIGKILL: the spool
  still holds every record) and exits. A worker dies with its parent (SIGTERM from the kernel, PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prometheus_client import multiprocess

from maasctl import eventloop
from maasctl.gateway.config import GatewaySettings, workers_problem
from maasctl.gateway.pool import PoolState, Worker, reuse_port_socket
from maasctl.gateway.spool import (
    adopt_directory,
    lock_directory,
    move_segments,
    worker_directories,
    worker_directory,
)
from maasctl.logging import configure_logging

__all__ = ["METRICS_DIR_ENV", "WorkerMain", "WorkerPool", "WorkersRefused"]

log = logging.getLogger("maasctl.gateway.workers")

METRICS_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus-client when a worker imports it
MAX_BACKOFF: Final = 30.0

WorkerMain = Callable[[GatewaySettings, Worker], Coroutine[Any, Any, int]]
"""A worker's serving coroutine (a module-level function: the spawned process imports it by name)."""


class WorkersRefused(ValueError):
    """The settings cannot run several workers (`config.workers_problem`)."""


@dataclass(frozen=True)
class _Spec:
    """What a spawned worker gets from its parent (pickled over the spawn pipe, never on the command line)."""

    index: int
    parent: int
    settings: GatewaySettings
    state: PoolState
    metrics_dir: str
    main: WorkerMain


def _worker_process(spec: _Spec) -> None:
    """A worker's process: die with the parent, configure logging, serve until SIGTERM."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: drain and exit when the parent dies
    if os.getppid() != spec.parent:  # it died before the line above
        raise SystemExit(1)
    fmt, level = spec.settings.logging
    configure_logging(fmt=fmt, level=level)
    raise SystemExit(eventloop.run(spec.main(spec.settings, Worker(spec.index, spec.state, spec.metrics_dir))))


class WorkerPool:
    """The parent of `settings.workers` worker processes, each running `main`. `start()` (ports, spools,
    metrics directory; returns the settings with the ports bound), then `await run(stop)` until `stop` is set."""

    def __init__(self, settings: GatewaySettings, main: WorkerMain, *, ports: tuple[str, ...] = ("port",),
                 grace: float = 30.0) -> None:
        problem = workers_problem(settings)
        if problem is not None:
            raise WorkersRefused(problem)
        self.settings = settings
        self.main = main
        self.count = settings.workers
        self.grace = grace
        self._ports = ports
        self._context = multiprocessing.get_context("spawn")
        self.state = PoolState(self.count, self._context)
        self.metrics_dir = ""
        self._sockets: list[socket.socket] = []
        self._spool_lock = -1
        self._procs: list[Any] = [None] * self.count
        self._ended: dict[int, asyncio.Future[None]] = {}  # pid -> done once that process ended
        self._starts = [0] * self.count
        self._failures = [0] * self.count
        self._exits: asyncio.Queue[int] = asyncio.Queue()
        self._stopping = False

    def start(self) -> GatewaySettings:
        """Reserve the ports, assign the spools and create the metrics directory (nothing is spawned yet)."""
        settings = self.settings
        try:
            for name in self._ports:
                port = getattr(settings, name)
                if port is None:
                    continue
                sock = reuse_port_socket(settings.host, port)
                self._sockets.append(sock)
                settings = dataclasses.replace(settings, **{name: sock.getsockname()[1]})
            if settings.usage_spool_dir:
                self._spool_lock = _assign_spools(Path(settings.usage_spool_dir), self.count)
            if not settings.maas_api_token and not settings.relay_secret:
                settings = dataclasses.replace(settings, relay_secret=secrets.token_hex(32))
            self.metrics_dir = tempfile.mkdtemp(prefix="maasctl-metrics-")
        except BaseException:
            self.close()
            raise
        # prometheus-client chooses file-backed values when a process imports it with this set: the workers do
        # (spawned later); this process imported it already and keeps its own in memory
        os.environ[METRICS_DIR_ENV] = self.metrics_dir
        self.settings = settings
        return settings

    def _spawn(self, index: int) -> None:
        if self._stopping:
            return
        settings = self.settings
        if settings.usage_spool_dir:
            settings = dataclasses.replace(
                settings, usage_spool_dir=str(worker_directory(Path(settings.usage_spool_dir), index)))
        self.state.ready_flags[index] = self.state.served_flags[index] = 0
        spec = _Spec(index, os.getpid(), settings, self.state, self.metrics_dir, self.main)
        proc = self._context.Process(target=_worker_process, args=(spec,), name=f"maasctl-worker-{index}")
        proc.start()
        assert proc.pid is not None
        self._procs[index] = proc
        self._starts[index] += 1
        loop = asyncio.get_running_loop()
        self._ended[proc.pid] = loop.create_future()
        loop.add_reader(proc.sentinel, self._exited, index, proc)  # readable once the process ended
        log.info("worker %d started (pid %d)", index, proc.pid)

    def _exited(self, index: int, proc: Any) -> None:
        asyncio.get_running_loop().remove_reader(proc.sentinel)
        self._ended.pop(proc.pid).set_result(None)
        if not self._stopping:
            self._exits.put_nowait(index)

    async def run(self, stop: asyncio.Event) -> int:
        """Start the workers and keep them running until `stop`; then drain them. 0, or 1 when a worker could
        not start."""
        for index in range(self.count):
            self._spawn(index)
        stopped = asyncio.ensure_future(stop.wait())
        code = 0
        try:
            while True:
                exited = asyncio.ensure_future(self._exits.get())
                await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not exited.done():
                    exited.cancel()
                    break
                if not self._restart(exited.result()):
                    code = 1
                    break
        finally:
            stopped.cancel()
            await self._shutdown()
            self.close()
        return code

    def _restart(self, index: int) -> bool:
        """A worker died: start it again (False: it never became ready at its first start; the pool stops)."""
        proc = self._procs[index]
        proc.join(0)
        served = bool(self.state.served_flags[index])
        self.state.ready_flags[index] = 0
        multiprocess.mark_process_dead(proc.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        if not served and self._starts[index] == 1:
            log.error("worker %d (pid %d) exited with %s before it was ready: stopping", index, proc.pid,
                      proc.exitcode)
            return False
        self._failures[index] = 0 if served else self._failures[index] + 1
        delay = min(MAX_BACKOFF, 2.0 ** (self._failures[index] - 1)) if self._failures[index] else 0.0
        self.state.restarts.value += 1
        log.error("worker %d (pid %d) exited with %s; the pool is not ready until it is started again (in %.0f s) "
                  "and ready", index, proc.pid, proc.exitcode, delay)
        asyncio.get_running_loop().call_later(delay, self._spawn, index)
        return True

    async def _shutdown(self) -> None:
        """SIGTERM to every worker, wait up to `grace` seconds for them to drain, SIGKILL what is left."""
        self._stopping = True
        live = {self._ended[p.pid]: p for p in self._procs if p is not None and p.pid in self._ended}
        for proc in live.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        _, late = await asyncio.wait(live, timeout=self.grace) if live else (set(), set())
        for ended in late:
            proc = live[ended]
            log.error("worker pid %d did not stop within %.0f s: killed (its spool keeps its records)",
                      proc.pid, self.grace)
            asyncio.get_running_loop().remove_reader(proc.sentinel)
            self._ended.pop(proc.pid, None)
            ended.cancel()
            proc.kill()
        for proc in live.values():
            proc.join(5)

    def close(self) -> None:
        """Release the ports, the spool root and the metrics directory."""
        for sock in self._sockets:
            sock.close()
        self._sockets = []
        if self._spool_lock >= 0:
            os.close(self._spool_lock)
            self._spool_lock = -1
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            if os.environ.get(METRICS_DIR_ENV) == self.metrics_dir:
                del os.environ[METRICS_DIR_ENV]
            self.metrics_dir = ""


def _assign_spools(root: Path, workers: int) -> int:
    """Lock the spool root (held by the parent: no other gateway may use it) and give every record found under
    it to one of the `workers` directories: the root's own segments (a one-process run) to worker 0, a worker
    directory beyond the count (a run with more workers) to worker `index % workers`. Returns the root's lock."""
    fd = lock_directory(root)
    try:
        for index in range(workers):
            worker_directory(root, index).mkdir(exist_ok=True)
        moves = [(root, worker_directory(root, 0))]
        moves += [(d, worker_directory(root, index % workers)) for index, d in worker_directories(root)
                  if index >= workers]
        for source, target in moves:
            target_lock = lock_directory(target)
            try:
                if source == root:
                    move_segments(root, target)
                else:
                    adopt_directory(source, target)
            finally:
                os.close(target_lock)
    except BaseException:
        os.close(fd)
        raise
    return fd

