"""The one run loop of every operator process: connect, build the manager, run it until a stop, and exit.

``run_manager`` does what each process used to write by hand: SIGTERM/SIGINT (or the caller's ``stop`` event,
for tests and ``maasctl dev``) stop the manager gracefully; tasks registered on the ``Lifetime`` (a webhook
receiver, ...) run beside the manager for as long as it runs, and one that fails (or returns) stops the
manager and the process ends with its error, never silently; a lost leader lease ends it with exit code
``EXIT_LEADER_ELECTION_LOST`` (the pod restarts and competes afresh); resources registered with
``Lifetime.on_exit`` are closed on every way out, last registered first, and the API client after them.
The runtime knows nothing of what a process wires: ``build`` does it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kubernetes_asyncio.client import ApiClient

from maasctl.runtime.errors import LeaderElectionLost
from maasctl.runtime.manager import Manager, ManagerOptions

__all__ = ["EXIT_LEADER_ELECTION_LOST", "EXIT_OK", "Lifetime", "run_manager", "stop_on_signals"]

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_LEADER_ELECTION_LOST = 1

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Per event loop, the stop events a SIGINT/SIGTERM sets: several run loops (and `maasctl dev`) share one event
# loop, and one that ends must not take the others' signal handling with it.
_signal_stops: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}


def stop_on_signals(stop: asyncio.Event) -> Callable[[], None]:
    """SIGINT/SIGTERM set ``stop`` (where the loop can handle signals); returns the undo."""
    loop = asyncio.get_running_loop()
    stops = _signal_stops.setdefault(loop, [])
    if not stops:
        def on_signal() -> None:
            for event in list(stops):
                event.set()

        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal)
    stops.append(stop)

    def undo() -> None:
        with contextlib.suppress(ValueError):
            stops.remove(stop)
        if not stops and _signal_stops.get(loop) is stops:
            del _signal_stops[loop]
            for sig in _SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)

    return undo


class Lifetime:
    """What a process adds around its manager: tasks beside it and resources to close on the way out."""

    def __init__(self, exit_stack: contextlib.AsyncExitStack) -> None:
        self._exit = exit_stack
        self.tasks: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = []

    def run_alongside(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``run()`` from the start until the manager has stopped (then it is cancelled; clean up in a
        ``finally``). It runs on every replica, elected or not. If it raises or returns, the manager stops
        and ``run_manager`` raises that error."""
        self.tasks.append((name, run))

    def on_exit(self, close: Callable[[], Awaitable[object]]) -> None:
        """Await ``close()`` on the way out, after the manager and the tasks stopped (last registered first)."""

        async def call() -> None:
            await close()

        self._exit.push_async_callback(call)


Build = Callable[[ApiClient, Lifetime], Manager]


async def run_manager(
    options: ManagerOptions | None = None,
    setup: Callable[[Manager], None] | None = None,
    *,
    build: Build | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    stop: asyncio.Event | None = None,
    signals: bool = True,
    name: str = "manager",
) -> int:
    """Connect, build the manager (``build(api, lifetime)``, or ``Manager(api, options)`` then ``setup``),
    run it until SIGTERM/SIGINT or ``stop``; the exit code: ``EXIT_OK``, or ``EXIT_LEADER_ELECTION_LOST``.

    ``kubeconfig`` None means in-cluster configuration (service account), else ~/.kube/config (see
    ``runtime.connect``). Any other failure (the manager's or a task's) is raised after cleaning up.
    """
    from maasctl.runtime.connect import connect

    if build is None:
        if options is None:
            raise TypeError("run_manager needs options (with setup) or build")
        build = _from_options(options, setup)
    stop = stop or asyncio.Event()
    undo = stop_on_signals(stop) if signals else (lambda: None)
    try:
        async with contextlib.AsyncExitStack() as exit_stack:
            api = await connect(kubeconfig, context)
            exit_stack.push_async_callback(api.close)
            lifetime = Lifetime(exit_stack)
            manager = build(api, lifetime)
            return await _run(manager, lifetime, stop, name)
    finally:
        undo()


def _from_options(options: ManagerOptions, setup: Callable[[Manager], None] | None) -> Build:
    def build(api: ApiClient, _: Lifetime) -> Manager:
        manager = Manager(api, options)
        if setup is not None:
            setup(manager)
        return manager

    return build


async def _run(manager: Manager, lifetime: Lifetime, stop: asyncio.Event, name: str) -> int:
    runner = asyncio.create_task(manager.run(), name=name)
    stopper = asyncio.create_task(stop.wait(), name=f"{name} stop")
    extras = {asyncio.create_task(_alongside(task, run), name=task): task for task, run in lifetime.tasks}
    failure: BaseException | None = None
    code = EXIT_OK
    try:
        done, _ = await asyncio.wait({runner, stopper, *extras}, return_when=asyncio.FIRST_COMPLETED)
        if runner not in done:
            failed = [t for t in extras if t in done]
            if failed:
                failure = failed[0].exception()
                log.error("a task beside the manager ended; stopping", extra={"task": extras[failed[0]],
                                                                             "error": str(failure)})
            else:
                log.info("shutting down", extra={"manager": name})
            manager.stop()
        try:
            await runner
        except LeaderElectionLost:
            if failure is None:
                log.error("leader election lost; exiting so a fresh process can compete again")
                code = EXIT_LEADER_ELECTION_LOST
        except Exception:
            if failure is None:
                raise
            log.exception("the manager failed while stopping for a failed task")
    finally:
        stopper.cancel()
        if not runner.done():  # we are cancelled ourselves: the manager goes too
            manager.stop()
            runner.cancel()
        for task in extras:
            task.cancel()
        results = await asyncio.gather(runner, stopper, *extras, return_exceptions=True)
        if failure is None:
            late = [r for r in results[2:] if isinstance(r, Exception)]
            if late:  # a task failed while the manager was stopping
                failure = late[0]
    if failure is not None:
        raise failure
    return code


async def _alongside(name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
    await run()
    raise RuntimeError(f"{name} ended while the manager was running")
