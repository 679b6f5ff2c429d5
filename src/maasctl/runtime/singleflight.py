"""One running computation per key: callers asking for a key already being computed await the same task.

Used where many callers want the same answer at once: discovery of a group-version when every informer starts
(``gvk.RestMapper``), and the gateway's auth decision for one credential under a burst of requests. A caller
that goes away (cancelled) does not cancel the computation the others wait for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Done = Callable[["asyncio.Task[V]", bool], None]
"""Called when a computation ends, with whether it was still the key's current one (``forget`` drops it)."""


class SingleFlight(Generic[K, V]):
    """The running task of each key, dropped when it ends or is forgotten."""

    def __init__(self) -> None:
        self._tasks: dict[K, asyncio.Task[V]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._tasks

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def get(self, key: K) -> asyncio.Task[V] | None:
        return self._tasks.get(key)

    def running(self) -> list[asyncio.Task[V]]:
        return list(self._tasks.values())

    def start(self, key: K, work: Coroutine[Any, Any, V], on_done: Done[V] | None = None) -> asyncio.Task[V]:
        """Run ``work`` as the key's computation (replacing any current one as the key's)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[key] = task

        def done(t: asyncio.Task[V]) -> None:
            current = self._tasks.get(key) is t
            if current:
                del self._tasks[key]
            if on_done is not None:
                on_done(t, current)

        task.add_done_callback(done)
        return task

    async def wait(self, task: asyncio.Task[V]) -> V:
        """The task's result; cancelling this caller does not cancel the task."""
        return await asyncio.shield(task)

    def forget(self, key: K | None = None) -> None:
        """The next caller of ``key`` (or of any key) starts a new computation; running ones go on, not current."""
        if key is None:
            self._tasks.clear()
        else:
            self._tasks.pop(key, None)
