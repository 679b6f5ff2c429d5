"""What wakes a waiting standby: the lease watch's events, fed by a stub in place of the API server's stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from maasctl.runtime import Client, LeaderElectionOptions
from maasctl.runtime.leaderelection import LeaderElector


class _OneStream:
    """A watch that yields the given events once, then stays open (as a quiet server stream does)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    async def watch(self, *_: Any, **__: Any) -> AsyncIterator[dict[str, Any]]:
        for event in self.events:
            yield event
        await asyncio.Event().wait()


def _lease(holder: str | None) -> dict[str, Any]:
    return {"kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": holder} if holder else {}}


async def _frees(events: list[dict[str, Any]]) -> bool:
    elector = LeaderElector(cast(Client, _OneStream(events)), LeaderElectionOptions(enabled=True, name="l"))
    freed = asyncio.Event()
    task = asyncio.create_task(elector._watch_for_release(freed))
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return freed.is_set()


async def test_a_lease_without_holder_or_deleted_frees_it() -> None:
    assert await _frees([{"type": "MODIFIED", "object": _lease(None)}])
    assert await _frees([{"type": "ADDED", "object": _lease(None)}])
    assert await _frees([{"type": "DELETED", "object": _lease("a")}])


async def test_a_held_lease_or_an_error_event_frees_nothing() -> None:
    assert not await _frees([{"type": "MODIFIED", "object": _lease("a")}])
    assert not await _frees([{"type": "ADDED", "object": _lease("a")}])
    status = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old"}
    assert not await _frees([{"type": "ERROR", "object": status}])
    assert not await _frees([{"type": "BOOKMARK", "object": {"kind": "Lease", "metadata": {}}}])
