"""Deterministic usage records for the usage tests, and independent expectations computed from them."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

NOW = datetime(2026, 3, 15, 10, 30, tzinfo=UTC)
USERS = ("alice", "bob", "carol", "dave, jr.", 'o"neil')
SUBS = ("models-as-a-service/premium", "models-as-a-service/free", "other-ns/bobs")
MODELS = ("llm/granite", "llm/llama", "llm/tiny")
TOKENS = ("total_tokens", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
COUNTS = ("requests", "failed_requests", *TOKENS)


def make_records(n: int, seed: int = 7, span: timedelta = timedelta(days=75)) -> list[dict[str, Any]]:
    """`n` gateway-format records between NOW - span and NOW (one per distinct request id)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ts = NOW - timedelta(seconds=rnd.randrange(int(span.total_seconds())))
        user = rnd.choice(USERS)
        inp, out_t = rnd.randrange(0, 5000), rnd.randrange(0, 2000)
        out.append({
            "timestamp": ts.timestamp() if i % 2 else ts.isoformat(),
            "request_id": f"req-{seed}-{i:06d}",
            "user": user,
            "key_id": f"key-{USERS.index(user)}-{rnd.randrange(2)}",
            "subscription": rnd.choice(SUBS),
            "organization": rnd.choice(("org-a", "org-b", "")),
            "model": rnd.choice(MODELS),
            "route": "llm/route",
            "status": rnd.choice((200, 200, 200, 429, 500)),
            "latency_ms": round(rnd.random() * 1000, 3),
            "streamed": bool(i % 3),
            "input_tokens": inp,
            "cached_tokens": rnd.randrange(0, inp + 1),
            "output_tokens": out_t,
            "reasoning_tokens": rnd.randrange(0, out_t + 1),
            "total_tokens": inp + out_t,
            "charged_tokens": inp + out_t,
        })
    return out


def ts_of(rec: dict[str, Any]) -> datetime:
    t = rec["timestamp"]
    return datetime.fromtimestamp(t, UTC) if isinstance(t, float) else datetime.fromisoformat(t)


def expected(
    records: Iterable[dict[str, Any]],
    start: datetime,
    end: datetime,
    key: Callable[[dict[str, Any]], tuple[Any, ...]],
    keep: Callable[[dict[str, Any]], bool] = lambda r: True,
) -> dict[tuple[Any, ...], dict[str, int]]:
    """Totals per `key(record)` of the records in [start, end) that `keep` accepts."""
    out: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTS, 0))
    for r in records:
        if not (start <= ts_of(r) < end) or not keep(r):
            continue
        acc = out[key(r)]
        acc["requests"] += 1
        acc["failed_requests"] += int(r["status"] >= 400)
        for t in TOKENS:
            acc[t] += r[t]
    return dict(out)


def batches(records: Sequence[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [list(records[i:i + size]) for i in range(0, len(records), size)]
