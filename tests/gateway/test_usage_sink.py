"""HttpBatchSink: bearer token, byte-bounded batches, isolation of a rejected record, one flush at a time."""

from __future__ import annotations

import asyncio
import json

import httpx

from maasctl.gateway.usage import HttpBatchSink, UsageRecord


def record(i: int, user: str = "alice") -> UsageRecord:
    return UsageRecord(timestamp=1.0, request_id=f"r{i}", user=user, key_id="k", subscription="ns/s",
                       organization="", model="m/x", route="m/r", status=200, latency_ms=1.0, total_tokens=i)


async def test_batches_are_bounded_by_bytes_and_carry_the_token() -> None:
    bodies: list[bytes] = []
    auth: set[str | None] = set()

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        auth.add(request.headers.get("authorization"))
        return httpx.Response(200, json={"accepted": 1, "duplicates": 0})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=100, flush_interval=3600, token="s3cret",
                             max_batch_bytes=2000)
        for i in range(20):
            await sink.emit(record(i, user="u" * 200))
        assert await sink.flush()
        await sink.aclose()
    assert auth == {"Bearer s3cret"} and len(bodies) > 1 and all(len(b) <= 2000 for b in bodies)
    ids = [r["request_id"] for b in bodies for r in json.loads(b)["records"]]
    assert ids == [f"r{i}" for i in range(20)]


async def test_a_rejected_record_is_isolated_and_dropped_and_flushes_do_not_overlap() -> None:
    delivered: list[str] = []
    in_flight = 0
    overlap = False

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, overlap
        in_flight += 1
        overlap = overlap or in_flight > 1
        await asyncio.sleep(0.001)
        in_flight -= 1
        records = json.loads(request.content)["records"]
        if any(r["user"] == "bad" for r in records):
            return httpx.Response(422)
        delivered.extend(r["request_id"] for r in records)
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=8, flush_interval=3600)
        for i in range(16):
            await sink.emit(record(i, user="bad" if i == 5 else "alice"))
        results = await asyncio.gather(sink.flush(), sink.flush())
        await sink.aclose()
    assert all(results) and not overlap
    assert delivered == [f"r{i}" for i in range(16) if i != 5] and sink.rejected == 1 and sink.pending == 0
