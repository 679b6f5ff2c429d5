"""Discovery asks once per group-version however many informers look it up at the same time (at start every
informer does, and a restart made ~100 discovery requests for ~15 group-versions), and a shared request keeps
the old guarantees: an error reaches every caller and is asked again, a cancelled caller cancels nobody else,
and ``refresh`` means the next lookup asks the server."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from maasctl.runtime.errors import NotFound, ServerError
from maasctl.runtime.gvk import GroupVersionKind, RestMapper

WIDGET = GroupVersionKind("example.com", "v1", "Widget")
DOC = {"resources": [{"name": "widgets", "kind": "Widget", "namespaced": True},
                     {"name": "widgets/status", "kind": "Widget"}]}


class Discovery:
    """A discovery endpoint that answers when released, counting its requests."""

    def __init__(self, *answers: Mapping[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.requests = 0
        self.release = asyncio.Event()

    async def fetch(self, path: str) -> Mapping[str, Any]:
        assert path == "/apis/example.com/v1"
        self.requests += 1
        answer = self.answers.pop(0)
        await self.release.wait()
        if isinstance(answer, Exception):
            raise answer
        return answer


async def _started(mapper: RestMapper, n: int) -> list[asyncio.Task[Any]]:
    tasks = [asyncio.ensure_future(mapper.resource_for(WIDGET)) for _ in range(n)]
    await asyncio.sleep(0)
    return tasks


async def test_concurrent_lookups_share_one_request() -> None:
    server = Discovery(DOC)
    mapper = RestMapper(server.fetch)
    tasks = await _started(mapper, 20)
    server.release.set()
    infos = await asyncio.gather(*tasks)
    assert server.requests == 1
    assert {(i.plural, i.namespaced, i.subresources) for i in infos} == {("widgets", True, frozenset({"status"}))}
    await mapper.resource_for(WIDGET)  # answered from what was learnt
    assert server.requests == 1


async def test_informers_starting_together_ask_once() -> None:
    server = Discovery(DOC)
    mapper = RestMapper(server.fetch)
    asking = [asyncio.ensure_future(mapper.is_served(WIDGET)) for _ in range(20)]
    await asyncio.sleep(0)
    server.release.set()
    assert await asyncio.gather(*asking) == [True] * 20
    assert server.requests == 1


@pytest.mark.parametrize("error", [ServerError(503, "ServiceUnavailable", "etcd"), ConnectionResetError("reset")])
async def test_a_failed_request_reaches_every_caller_and_the_next_lookup_asks_again(error: Exception) -> None:
    server = Discovery(error, DOC)
    mapper = RestMapper(server.fetch)
    tasks = await _started(mapper, 5)
    server.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r) for r in results] == [type(error)] * 5
    assert (await mapper.resource_for(WIDGET)).plural == "widgets"
    assert server.requests == 2


async def test_a_cancelled_caller_does_not_cancel_the_others() -> None:
    server = Discovery(DOC)
    mapper = RestMapper(server.fetch)
    first, second = await _started(mapper, 2)
    first.cancel()
    await asyncio.sleep(0)
    server.release.set()
    assert (await second).plural == "widgets"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert server.requests == 1


async def test_a_refresh_while_a_request_is_on_its_way_makes_the_next_lookup_ask_again() -> None:
    missing: dict[str, Any] = {"resources": []}
    server = Discovery(missing, DOC)  # asked before the CRD was installed, then after
    mapper = RestMapper(server.fetch)
    (stale,) = await _started(mapper, 1)
    mapper.refresh("example.com/v1")
    fresh = asyncio.ensure_future(mapper.resource_for(WIDGET))
    server.release.set()
    with pytest.raises(NotFound):
        await stale
    assert (await fresh).plural == "widgets"
    assert (await mapper.resource_for(WIDGET)).plural == "widgets"  # the stale answer was not kept
    assert server.requests == 2


async def test_a_group_version_not_served_is_remembered_until_asked_again() -> None:
    server = Discovery(NotFound(404, "NotFound", "no such group"), DOC)
    server.release.set()
    mapper = RestMapper(server.fetch)
    with pytest.raises(NotFound):
        await mapper.resource_for(WIDGET)
    with pytest.raises(NotFound):
        await mapper.resource_for(WIDGET)
    assert server.requests == 1
    assert await mapper.is_served(WIDGET)  # is_served asks again for a kind it has not seen
    assert server.requests == 2
