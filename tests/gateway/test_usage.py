"""Usage records reach maas-api in batches and survive an outage (bounded buffer)."""

from __future__ import annotations

import json

import httpx

from maasctl.gateway.usage import USAGE_PATH, HttpBatchSink, UsageRecord


def record(i: int) -> UsageRecord:
    return UsageRecord(timestamp=1.0, request_id=str(i), user="alice", key_id="k", subscription="ns/s",
                       organization="", model="m/x", route="m/r", status=200, latency_ms=1.0, total_tokens=i)


async def test_batches_are_retried_until_delivered_and_the_buffer_is_bounded() -> None:
    received: list[list[dict[str, object]]] = []
    up = False

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == USAGE_PATH
        if not up:
            return httpx.Response(503)
        received.append(json.loads(request.content)["records"])
        return httpx.Response(202)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://maas-api.test/", http, batch_size=2, flush_interval=3600, max_buffer=3)
        for i in range(4):
            sink.emit(record(i))
        assert sink.dropped == 1 and sink.pending == 3
        assert not await sink.flush() and sink.pending == 3  # maas-api down: nothing lost
        up = True
        assert await sink.flush()
        await sink.aclose()
    assert [[r["request_id"] for r in batch] for batch in received] == [["1", "2"], ["3"]]
    assert sink.sent == 3 and "key" not in json.dumps(received).replace("key_id", "")
