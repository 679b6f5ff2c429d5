"""Usage metering end to end (issue 9): records from the local data plane reach maas-api's reports and CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx

from e2e.conftest import Need, World, eventually
from maasctl.tls import default_tls


async def test_usage_of_limited_and_unlimited_models_reaches_reports_and_csv(world: World) -> None:
    world.require(Need.ADMIN_TOKEN)
    await world.apply(*world.external_model("gpt"))
    metered, unlimited = world.name("metered"), world.name("unlimited")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice", "bob")),
                      world.subscription(metered, {"gpt": [(100000, "1m")]}, users=("alice",)),
                      world.subscription(unlimited, {"gpt": None}, users=("bob",)))
    await world.wait_active(metered, unlimited)
    alice = (await world.mint("alice", subscription=metered))["key"]
    bob = (await world.mint("bob", subscription=unlimited))["key"]
    await world.wait_enforced("gpt", alice)
    await world.wait_enforced("gpt", bob)
    for _ in range(2):
        assert (await world.chat("gpt", alice)).status_code == 200
    assert (await world.chat("gpt", alice, stream=True)).status_code == 200
    for _ in range(3):
        assert (await world.chat("gpt", bob)).status_code == 200
    # Expected from the calls above (each answer: 10 prompt + 5 completion tokens), wait_enforced included.
    expected = {(f"{world.sub_ns()}/{metered}", world.username("alice")): 4,
                (f"{world.sub_ns()}/{unlimited}", world.username("bob")): 4}
    admin = world.admin_headers()

    async def report_rows() -> dict[tuple[str, str], dict[str, Any]]:
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
            for sub in (metered, unlimited):
                resp = await http.get("/v1/usage/report", params={"range": "1d", "subscription": sub},
                                      headers=admin)
                assert resp.status_code == 200, resp.text
                rows.update({(r["subscription"], r["username"]): r for r in resp.json()["data"]})
        return rows

    async def all_recorded() -> bool:
        rows = await report_rows()
        return all(rows.get(k, {}).get("requests") == n for k, n in expected.items())

    await eventually(all_recorded, timeout=30, describe=lambda: f"expected request counts {expected}")
    rows = await report_rows()
    for key, calls in expected.items():
        row = rows[key]
        assert (row["totalTokens"], row["inputTokens"], row["outputTokens"]) == (15 * calls, 10 * calls, 5 * calls)
        assert row["cachedTokens"] == row["reasoningTokens"] == 0

    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
        resp = await http.get("/v1/usage/export", params={"groupBy": "subscription", "by": "day"}, headers=admin)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/csv")
    exported = list(csv.DictReader(io.StringIO(resp.text)))
    ours = {r["subscription"]: r for r in exported if r["subscription"] in {k[0] for k in expected}}
    assert {sub: int(r["total_tokens"]) for sub, r in ours.items()} == {k[0]: 15 * n for k, n in expected.items()}
