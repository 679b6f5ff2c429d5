"""Delegated administration by organization (issue 25): an organization's administrators list, search and revoke
the keys of their organization's subscriptions and read its usage, and nothing of another organization -
against the real local stack over HTTP. Every test here tries to cross the boundary in several ways.

The cast: organization A is administered by premium-users (alice), organization B by free-users (bob); carol,
in neither group, holds a key in A's subscription, in B's and in one without an organization.
"""

from __future__ import annotations

import contextlib
import csv
import io
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from e2e.conftest import World, eventually

from maasctl.reconcilers.kinds import CONFIG_MAP, MAAS_SUBSCRIPTION
from maasctl.runtime import NotFound
from maasctl.tls import default_tls


@dataclass
class Orgs:
    a: str
    b: str
    subs: dict[str, str]  # "a" | "b" | "none" -> subscription name
    keys: dict[str, dict[str, Any]]  # carol's minted keys, same labels
    mapping: str  # the ConfigMap's name

    def ids(self, *which: str) -> set[str]:
        return {str(self.keys[w]["id"]) for w in which}

    @property
    def all_ids(self) -> set[str]:
        return self.ids("a", "b", "none")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def two_organizations(world: World, *, usage: bool = False) -> Orgs:
    await world.apply(*world.external_model("gpt"))
    orgs = Orgs(world.name("org-a"), world.name("org-b"),
                {"a": world.name("sa"), "b": world.name("sb"), "none": world.name("sn")}, {}, world.name("orgs"))
    await world.apply(
        world.organization_admins(orgs.mapping, {orgs.a: ("premium-users",), orgs.b: ("free-users",)}),
        world.auth_policy(world.name("ap"), ["gpt"], users=("carol",)),
        world.subscription(orgs.subs["a"], {"gpt": [(100_000, "1m")]}, users=("carol",), organization=orgs.a),
        world.subscription(orgs.subs["b"], {"gpt": [(100_000, "1m")]}, users=("carol",), organization=orgs.b),
        world.subscription(orgs.subs["none"], {"gpt": [(100_000, "1m")]}, users=("carol",)),
    )
    await world.wait_active(*orgs.subs.values())
    for which, sub in orgs.subs.items():
        orgs.keys[which] = await world.mint("carol", subscription=sub)
    if usage:
        for which in orgs.subs:
            await world.wait_enforced("gpt", orgs.keys[which]["key"])
    # the mapping reaches maas-api through its watch: until alice sees her organization's key
    await eventually(lambda: _sees(world, "alice", orgs.ids("a")), timeout=30)
    return orgs


async def retire(world: World, orgs: Orgs) -> None:
    """Delete the subscriptions and wait for their key cleanup Jobs to finish (the Jobs are this process's
    children on the local stack: the test must not end while they run)."""
    for sub in orgs.subs.values():
        with contextlib.suppress(NotFound):
            await world.client.delete(MAAS_SUBSCRIPTION, sub, world.sub_ns())

    async def gone() -> bool:
        for sub in orgs.subs.values():
            try:
                await world.client.get(MAAS_SUBSCRIPTION, sub, world.sub_ns())
                return False
            except NotFound:
                pass
        return True

    await eventually(gone, timeout=60)


async def search(world: World, user: str, **filters: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        return await http.post("/v1/api-keys/search", json={"filters": filters, "pagination": {"limit": 100}},
                               headers=bearer(world.token(user)))


async def _sees(world: World, user: str, ids: set[str]) -> bool:
    r = await search(world, user, status=["active", "revoked", "expired"])
    return r.status_code == 200 and ids <= {k["id"] for k in r.json()["data"]}


async def chat_ok(world: World, key: str) -> bool:
    return (await world.chat("gpt", key)).status_code == 200


async def test_an_organization_admin_lists_and_searches_only_their_organizations_keys(world: World) -> None:
    orgs = await two_organizations(world)
    ns = world.sub_ns()
    carol = world.username("carol")
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({}, orgs.ids("a")),
        ({"status": ["active", "revoked", "expired"]}, orgs.ids("a")),
        ({"username": carol}, orgs.ids("a")),
        ({"subscription": orgs.subs["a"]}, orgs.ids("a")),
        ({"subscription": f"{ns}/{orgs.subs['a']}"}, orgs.ids("a")),
        ({"subscription": orgs.subs["b"]}, set()),
        ({"subscription": f"{ns}/{orgs.subs['b']}"}, set()),
        ({"subscription": f" {orgs.subs['b']} "}, set()),
        ({"subscription": orgs.subs["none"]}, set()),
        ({"username": carol, "subscription": orgs.subs["b"]}, set()),
        ({"username": carol.upper()}, set()),
        ({"username": f"{carol} "}, set()),
        ({"nameContains": ""}, orgs.ids("a")),
    ]
    for filters, expected in cases:
        r = await search(world, "alice", **filters)
        assert r.status_code in (200, 400), (filters, r.text)
        found = {k["id"] for k in r.json()["data"]} if r.status_code == 200 else set()
        assert found & orgs.all_ids == expected, filters
        # nothing else of another organization: whatever comes back is alice's own or in her organization
        for k in r.json().get("data", []) if r.status_code == 200 else ():
            assert k["id"] not in orgs.ids("b", "none"), (filters, k)
    # bob, the other organization's admin, sees the mirror image
    r = await search(world, "bob", username=carol)
    assert {k["id"] for k in r.json()["data"]} & orgs.all_ids == orgs.ids("b")
    # one key by id: the others' keys are as missing as a key that never existed
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        missing = await http.get("/v1/api-keys/" + "0" * 32, headers=bearer(world.token("alice")))
        assert missing.status_code == 404
        for which, status in (("a", 200), ("b", 404), ("none", 404)):
            r = await http.get(f"/v1/api-keys/{orgs.keys[which]['id']}", headers=bearer(world.token("alice")))
            assert r.status_code == status, (which, r.text)
            if status == 404:
                assert r.json() == missing.json()
        # the plain listing stays the caller's own keys
        mine = await http.get("/v1/api-keys", headers=bearer(world.token("alice")))
        assert not {k["id"] for k in mine.json()["data"]} & orgs.all_ids
    # carol administers nothing: another user's keys are refused
    assert (await search(world, "carol", username=world.username("alice"))).status_code == 403
    await retire(world, orgs)


async def test_an_organization_admin_revokes_only_their_organizations_keys(world: World) -> None:
    orgs = await two_organizations(world)
    for which in orgs.subs:
        await world.wait_enforced("gpt", orgs.keys[which]["key"])
    ns = world.sub_ns()
    alice = bearer(world.token("alice"))
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        # another organization's key, or one without an organization: 404, not revoked
        for which in ("b", "none"):
            r = await http.delete(f"/v1/api-keys/{orgs.keys[which]['id']}", headers=alice)
            assert r.status_code == 404, r.text
        # a subscription that is not hers, however it is spelled: 403, nothing revoked (also not in a dry run)
        for sub in (orgs.subs["b"], f"{ns}/{orgs.subs['b']}", orgs.subs["none"], f"other-ns/{orgs.subs['a']}",
                    world.name("does-not-exist")):
            for dry in (True, False):
                r = await http.post("/v1/api-keys/bulk-revoke", headers=alice,
                                    json={"subscription": sub, "dryRun": dry})
                assert r.status_code == 403, (sub, r.text)
        # a user's keys: only those of her organization
        r = await http.post("/v1/api-keys/bulk-revoke", headers=alice,
                            json={"username": world.username("carol"), "dryRun": True})
        assert r.status_code == 200 and r.json()["revokedCount"] == 1, r.text
    for which in orgs.subs:
        assert await chat_ok(world, orgs.keys[which]["key"]), which
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        r = await http.post("/v1/api-keys/bulk-revoke", headers=alice, json={"username": world.username("carol")})
        assert r.status_code == 200 and r.json()["revokedCount"] == 1, r.text
        # her organization's subscription by name is hers to revoke (nothing active is left in it)
        r = await http.post("/v1/api-keys/bulk-revoke", headers=alice, json={"subscription": orgs.subs["a"]})
        assert r.status_code == 200 and r.json()["revokedCount"] == 0, r.text
        shown = await http.get(f"/v1/api-keys/{orgs.keys['a']['id']}", headers=alice)
        assert shown.json()["status"] == "revoked"

    async def a_refused() -> bool:
        return (await world.chat("gpt", orgs.keys["a"]["key"])).status_code in (401, 403)

    await eventually(a_refused, timeout=10)
    assert await chat_ok(world, orgs.keys["b"]["key"]) and await chat_ok(world, orgs.keys["none"]["key"])
    # bob revokes his organization's key by id
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        r = await http.delete(f"/v1/api-keys/{orgs.keys['b']['id']}", headers=bearer(world.token("bob")))
        assert r.status_code == 200 and r.json()["status"] == "revoked"
    assert await chat_ok(world, orgs.keys["none"]["key"])
    await retire(world, orgs)


async def test_an_organization_admin_reads_only_their_organizations_usage(world: World) -> None:
    orgs = await two_organizations(world, usage=True)
    ns = world.sub_ns()
    alice = bearer(world.token("alice"))
    ours = {f"{ns}/{s}" for s in orgs.subs.values()}

    async def report(headers: dict[str, str], **params: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
            return await http.get("/v1/usage/report", params={"range": "1d", **params}, headers=headers)

    async def recorded() -> bool:  # carol's three calls reached maas-api (the admin sees all three)
        r = await report(world.admin_headers())
        return {row["subscription"] for row in r.json()["data"]} >= ours

    await eventually(recorded, timeout=30)
    r = await report(alice)
    assert r.status_code == 200, r.text
    assert {row["subscription"] for row in r.json()["data"]} == {f"{ns}/{orgs.subs['a']}"}
    assert r.json()["totals"]["requests"] == 1
    for params in ({"subscription": orgs.subs["b"]}, {"subscription": f"{ns}/{orgs.subs['none']}"},
                   {"organization": orgs.a, "subscription": orgs.subs["b"]}):
        r = await report(alice, **params)
        assert r.status_code == 200 and r.json()["data"] == [], (params, r.text)
    for org in (orgs.b, orgs.a.upper(), f"{orgs.a} ", f"{orgs.a}%2F", f"{orgs.a},{orgs.b}", "*"):
        assert (await report(alice, organization=org)).status_code == 403, org
    assert (await report(alice, organization="")).status_code == 400
    r = await report(bearer(world.token("bob")))
    assert {row["subscription"] for row in r.json()["data"]} == {f"{ns}/{orgs.subs['b']}"}
    # the platform admin keeps everything, and may narrow by organization
    r = await report(world.admin_headers(), organization=orgs.b)
    assert {row["subscription"] for row in r.json()["data"]} == {f"{ns}/{orgs.subs['b']}"}

    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        csv_resp = await http.get("/v1/usage/export", headers=alice,
                                  params={"groupBy": "key", "by": "day", "range": "1d"})
        assert csv_resp.status_code == 200, csv_resp.text
        rows = list(csv.DictReader(io.StringIO(csv_resp.text)))
        assert {r["key_id"] for r in rows} == orgs.ids("a")
        other = await http.get("/v1/usage/export", headers=alice, params={"organization": orgs.b})
        assert other.status_code == 403 and "text/csv" not in other.headers.get("content-type", "")
        raw = await http.get("/v1/usage/records", headers=alice, params={"limit": 1000})
        assert raw.status_code == 200 and {r["subscription"] for r in raw.json()} == {f"{ns}/{orgs.subs['a']}"}
        # one subscription's usage: all of its users for her organization's, nothing of another's
        mine = await http.get(f"/v1/usage/subscriptions/{ns}/{orgs.subs['a']}", headers=alice)
        assert mine.status_code == 200 and mine.json()["totals"]["requests"] == 1, mine.text
        for which in ("b", "none"):
            r = await http.get(f"/v1/usage/subscriptions/{ns}/{orgs.subs[which]}", headers=alice)
            assert r.status_code == 404, (which, r.text)
        # carol, in no admin group, reads no report
        r = await http.get("/v1/usage/report", headers=bearer(world.token("carol")))
        assert r.status_code == 403
    await retire(world, orgs)


@pytest.mark.parametrize("variant", ["api-key", "mapping-removed", "broad-group", "case-and-padding"])
async def test_who_the_mapping_does_not_name_exactly_administers_nothing(world: World, variant: str) -> None:
    orgs = await two_organizations(world)
    alice = bearer(world.token("alice"))
    if variant == "api-key":
        # alice's own API key (in her organization's subscription) never administers anything
        await world.apply(world.subscription(orgs.subs["a"], {"gpt": [(100_000, "1m")]}, users=("carol", "alice"),
                                             organization=orgs.a))

        async def minted() -> dict[str, Any] | None:
            async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
                r = await http.post("/v1/api-keys", headers=alice, json={"name": "k", "subscription": orgs.subs["a"]})
            return r.json() if r.status_code == 201 else None

        key: dict[str, Any] = {}

        async def got_key() -> bool:
            key.update(await minted() or {})
            return bool(key)

        await eventually(got_key, timeout=30)
        world.cleanup.keys.append((world.token("alice"), str(key["id"])))
        headers = bearer(key["key"])
    elif variant == "mapping-removed":
        await world.client.delete(CONFIG_MAP, orgs.mapping, world.sub_ns())
        headers = alice

        async def gone() -> bool:
            return not await _sees(world, "alice", orgs.ids("a"))

        await eventually(gone, timeout=30)
    elif variant == "broad-group":
        # a mapping that would make everyone an admin of A is refused whole: bob (B's admin) gains nothing
        await world.apply(world.organization_admins(world.name("broad"), {}, raw=(
            f"- id: {orgs.a}\n  adminGroups: [system:authenticated]\n"
            f"- id: {orgs.a}\n  adminGroups: ['*']\n")))
        headers = bearer(world.token("bob"))
    else:
        # bob's groups are mapped to look-alikes of A's id only: A stays closed to him
        await world.apply(world.organization_admins(world.name("lookalike"), {}, raw="".join(
            f"- id: {odd!r}\n  adminGroups: [{world.group('free-users')}]\n"
            for odd in (orgs.a.upper(), orgs.a + "-", orgs.a[:-1], f"{world.sub_ns()}/{orgs.a}"))))
        headers = bearer(world.token("bob"))
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        r = await http.post("/v1/api-keys/search", headers=headers, json={"filters": {
            "username": world.username("carol"), "status": ["active", "revoked", "expired"]}})
        found = {k["id"] for k in r.json().get("data", [])} if r.status_code == 200 else set()
        assert not found & orgs.ids("a"), (variant, r.text)
        r = await http.get(f"/v1/api-keys/{orgs.keys['a']['id']}", headers=headers)
        assert r.status_code in (403, 404), r.text
        r = await http.delete(f"/v1/api-keys/{orgs.keys['a']['id']}", headers=headers)
        assert r.status_code in (403, 404), r.text
        r = await http.post("/v1/api-keys/bulk-revoke", headers=headers, json={"subscription": orgs.subs["a"]})
        assert r.status_code == 403, r.text
        for path in ("/v1/usage/report", "/v1/usage/export", "/v1/usage/records"):
            r = await http.get(path, headers=headers, params={"organization": orgs.a})
            assert r.status_code == 403, (path, r.text)
        r = await http.get(f"/v1/usage/subscriptions/{world.sub_ns()}/{orgs.subs['a']}", headers=headers,
                           params={"user": world.username("carol")})
        assert r.status_code in (403, 404), r.text
    assert await chat_ok(world, orgs.keys["a"]["key"])  # nothing was revoked
    await retire(world, orgs)
