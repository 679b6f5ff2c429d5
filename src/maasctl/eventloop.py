"""How the long-running processes run their event loop: `run(coro)` and `tune_gc()`.

Every server process (controller, gateway, maas-api, ...) runs on the loop uvicorn would pick (uvloop when it is
installed): the default asyncio loop costs noticeably more CPU per request and per watch event, and under load
that CPU is queueing time on every request. `tune_gc()` keeps the collector's pauses off the hot paths.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

from uvicorn.loops.auto import auto_loop_factory

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` on uvloop when installed (else the default loop)."""
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        return runner.run(coro)


def tune_gc() -> None:
    """Move start-up objects out of the collector's view and collect the young generation less often:
    fewer and shorter collector pauses on the request paths (they show up directly in p99)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
