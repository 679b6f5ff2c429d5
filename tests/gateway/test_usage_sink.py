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
            sink.emit(record(i, user="u" * 200))
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
            sink.emit(record(i, user="bad" if i == 5 else "alice"))
        results = await asyncio.gather(sink.flush(), sink.flush())
        await sink.aclose()
    assert all(results) and not overlap
    assert delivered == [f"r{i}" for i in range(16) if i != 5] and sink.rejected == 1 and sink.pending == 0


async def test_records_are_sent_in_whole_batches_and_the_rest_waits_for_the_interval() -> None:
    sizes: list[int] = []
    two = asyncio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        sizes.append(len(json.loads(request.content)["records"]))
        if len(sizes) == 2:
            two.set()
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=10, flush_interval=3600)
        for i in range(25):
            sink.emit(record(i))
        await asyncio.wait_for(two.wait(), 60)  # the background task sends the two whole batches
        for _ in range(20):
            await asyncio.sleep(0)
        assert sizes == [10, 10] and sink.pending == 5 and sink.posts == 2  # no small batch for the 5 left
        await sink.aclose()  # closing sends the rest
    assert sizes == [10, 10, 5] and sink.pending == 0 and sink.sent == 25


async def test_while_maas_api_fails_the_task_waits_for_the_backoff_instead_of_posting_on_every_record() -> None:
    posts = 0
    failed = asyncio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal posts
        posts += 1
        failed.set()
        return httpx.Response(503)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=5, flush_interval=3600, close_timeout=0)
        for i in range(5):
            sink.emit(record(i))
        await asyncio.wait_for(failed.wait(), 60)
        for i in range(5, 200):  # each of these fills the buffer beyond a batch and sets the wake-up
            sink.emit(record(i))
            await asyncio.sleep(0)
        assert posts == 1 and sink.failures == 1 and sink.pending == 200
        await sink.aclose()  # no time left to retry: everything still buffered is counted as undelivered
    assert sink.undelivered == 200 and sink.pending == 0 and sink.sent == 0


async def test_a_full_buffer_drops_the_oldest_record_not_in_flight_and_counts_it() -> None:
    delivered: list[str] = []
    posted = asyncio.Event()
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        posted.set()
        await release.wait()
        delivered.extend(r["request_id"] for r in json.loads(request.content)["records"])
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        sink = HttpBatchSink("http://m", http, batch_size=4, flush_interval=3600, max_buffer=6)
        for i in range(4):
            sink.emit(record(i))
        await asyncio.wait_for(posted.wait(), 60)  # r0..r3 in flight
        for i in range(4, 8):  # r6 and r7 find the buffer full: r4 and r5 (not in flight) make room
            sink.emit(record(i))
        assert sink.dropped == 2 and sink.pending == 6
        release.set()
        await sink.aclose()
    assert delivered == ["r0", "r1", "r2", "r3", "r6", "r7"] and sink.sent == 6 and sink.pending == 0
