"""`/v1/api-keys` as a client of the reference MaaS API uses it (its OpenAPI description and user docs), against
the real local stack: nothing destructive on an empty or unparseable filter, forged identity headers refused,
the reference's field names, error shape and status codes."""

from __future__ import annotations

from datetime import datetime

import pytest
from e2e.conftest import World, eventually

from tests.compat.helpers import api, chat_body, gateway, served_model
from tests.error_fields import error_code


async def _search(world: World, user: str, **body: object) -> list[dict[str, object]]:
    r = await api(world, "POST", "/v1/api-keys/search", token=world.token(user), json=body)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "list" and isinstance(r.json()["has_more"], bool)
    data: list[dict[str, object]] = r.json()["data"]
    return data


async def test_bulk_revoke_never_acts_on_an_empty_or_unparseable_filter(world: World) -> None:
    """The reference requires `username` (or, for admins, `subscription`): an empty filter is a 400, never
    "all my keys". Every variant leaves the caller's keys working at the gateway."""
    _, key = await served_model(world, user="carol")  # carol: a user no other journey revokes keys of
    key_id = key.removeprefix("sk-oai-").split("_")[0]
    bearer = world.token("carol")
    empty_bodies: list[dict[str, object]] = [
        {"json": {}}, {"json": {"dryRun": False}}, {"json": {"reason": "cleanup"}}, {"json": None},
        {"json": []}, {"json": "carol"}, {"json": {"username": ""}}, {"json": {"username": None}},
        {"json": {"subscription": ""}}, {"json": {"user": "carol"}},
        {"content": b"", "headers": {"content-type": "application/json"}},
        {"content": b"{", "headers": {"content-type": "application/json"}},
        {"content": b"username=carol", "headers": {"content-type": "application/x-www-form-urlencoded"}},
    ]
    for body in empty_bodies:
        r = await api(world, "POST", "/v1/api-keys/bulk-revoke", token=bearer, **body)  # type: ignore[arg-type]
        assert r.status_code == 400, (body, r.status_code, r.text)
        err = r.json()  # the reference's key envelope: `error` is the message, `code` beside it
        assert err["type"] == "invalid_request_error" and isinstance(err["error"], str) and err["error"] \
            and err["code"], body
    assert (await world.chat("gpt", key)).status_code == 200
    got = await api(world, "GET", f"/v1/api-keys/{key_id}", token=bearer)
    assert got.json()["status"] == "active"

    # the documented forms work: the caller's own username, dry-run first (counts only, no key ids)
    dry = await api(world, "POST", "/v1/api-keys/bulk-revoke", token=bearer,
                    json={"username": "carol", "dryRun": True})
    assert dry.status_code == 200 and dry.json()["revokedCount"] >= 1 and dry.json()["dryRun"] is True
    assert "keyIds" not in dry.json() and key_id not in dry.text
    assert (await world.chat("gpt", key)).status_code == 200
    done = await api(world, "POST", "/v1/api-keys/bulk-revoke", token=bearer, json={"username": "carol"})
    assert done.status_code == 200 and done.json()["revokedCount"] == dry.json()["revokedCount"]
    assert isinstance(done.json()["message"], str)
    assert (await api(world, "GET", f"/v1/api-keys/{key_id}", token=bearer)).json()["status"] == "revoked"

    async def refused() -> bool:
        return (await world.chat("gpt", key)).status_code in (401, 403)

    await eventually(refused)


async def test_bulk_revoke_of_others_or_a_subscription_is_for_admins(world: World) -> None:
    sub, key = await served_model(world)
    for body in ({"username": "alice"}, {"subscription": sub}, {"username": "alice", "subscription": sub}):
        r = await api(world, "POST", "/v1/api-keys/bulk-revoke", token=world.token("bob"), json=body)
        assert r.status_code == 403 and r.json()["type"] == "permission_error", body
    assert (await world.chat("gpt", key)).status_code == 200


@pytest.mark.parametrize("header", ["X-MaaS-Username", "X-MaaS-Group", "x-maas-user", "X_MAAS_USERNAME",
                                    "Impersonate-User", "X-Remote-Group", "X-Forwarded-User"])
async def test_forged_identity_headers_on_mint_are_refused_and_mint_nothing(world: World, header: str) -> None:
    """The reference refuses client-sent identity headers; maasctl refuses them in maas-api itself too (not only
    at the gateway), so a forged identity can never look like it worked."""
    before = await _search(world, "alice", filters={"includeEphemeral": True})
    forged = "admin" if "user" in header.lower() else '["maas-admins"]'
    r = await api(world, "POST", "/v1/api-keys", token=world.token("alice"), headers={header: forged},
                  json={"name": world.name("forged")})
    assert r.status_code == 403, (header, r.text)  # as the reference refuses them
    assert error_code(r) == "forbidden_header" and "sk-oai-" not in r.text
    assert await _search(world, "alice", filters={"includeEphemeral": True}) == before
    # the same header on any other call is refused as well; the gateway refuses it at the edge
    r = await api(world, "GET", "/v1/subscriptions", token=world.token("alice"), headers={header: forged})
    assert r.status_code == 403
    r = await gateway(world, "POST", f"/{world.namespace}/gpt/v1/chat/completions", json=chat_body(),
                      headers={"Authorization": f"Bearer {world.token('alice')}", header: forged})
    assert r.status_code == 403 and error_code(r) == "forbidden_header"


async def test_key_shapes_follow_the_reference(world: World) -> None:
    sub, _ = await served_model(world)
    r = await api(world, "POST", "/v1/api-keys", token=world.token("alice"),
                  json={"name": "ci", "description": "for CI", "expiresIn": "1.5d", "subscription": sub})
    assert r.status_code == 201, r.text
    minted = r.json()
    assert {"key", "keyPrefix", "id", "name", "subscription", "createdAt", "expiresAt", "ephemeral"} <= set(minted)
    assert minted["subscription"] == sub  # the name, as the reference binds keys (not namespace/name)
    lifetime = datetime.fromisoformat(minted["expiresAt"]) - datetime.fromisoformat(minted["createdAt"])
    assert lifetime.total_seconds() == 36 * 3600
    seconds = await api(world, "POST", "/v1/api-keys", token=world.token("alice"),
                        json={"name": "n", "expiresIn": 3600, "subscription": sub})  # a JSON number: seconds
    assert seconds.status_code == 201
    got = (await api(world, "GET", f"/v1/api-keys/{minted['id']}", token=world.token("alice"))).json()
    for field in ("id", "name", "description", "username", "subscription", "groups", "creationDate",
                  "expirationDate", "status", "ephemeral"):
        assert field in got, field
    assert got["subscription"] == sub and got["status"] == "active" and got["username"] == "alice"
    assert "key" not in got and "lastUsedAt" not in got  # never used yet

    await world.chat("gpt", minted["key"])
    used = (await api(world, "GET", f"/v1/api-keys/{minted['id']}", token=world.token("alice"))).json()
    assert datetime.fromisoformat(used["lastUsedAt"]) >= datetime.fromisoformat(used["creationDate"])
    listed = await _search(world, "alice", sort={"by": "last_used_at", "order": "desc"})
    assert listed[0]["id"] == minted["id"]

    cfg = (await api(world, "GET", "/v1/api-keys/config", token=world.token("alice"))).json()
    assert isinstance(cfg["max_expiration_days"], int) and cfg["max_expiration_days"] > 0
    assert cfg["ephemeral_max_expiration"] == "1h"


async def test_search_takes_labels_contain(world: World) -> None:
    sub, _ = await served_model(world)
    for name, team in (("a", "ml"), ("b", "web"), ("c", "ml")):
        r = await api(world, "POST", "/v1/api-keys", token=world.token("alice"),
                      json={"name": world.name(name), "subscription": sub, "labels": {"team": team}})
        assert r.status_code == 201
    found = await _search(world, "alice", filters={"labelsContain": {"team": "ml"}}, sort={"by": "name"})
    assert [k["name"] for k in found] == [world.name("c"), world.name("a")]


async def test_revoking_twice_is_404_and_errors_have_the_reference_shape(world: World) -> None:
    _, key = await served_model(world)
    key_id = key.removeprefix("sk-oai-").split("_")[0]
    bearer = world.token("alice")
    first = await api(world, "DELETE", f"/v1/api-keys/{key_id}", token=bearer)
    assert first.status_code == 200 and first.json()["status"] == "revoked"
    again = await api(world, "DELETE", f"/v1/api-keys/{key_id}", token=bearer)
    assert again.status_code == 404
    assert key_id not in {k["id"] for k in await _search(world, "alice")}  # search lists active keys by default
    assert key_id in {k["id"] for k in await _search(world, "alice", filters={"status": ["revoked"]})}
    # The reference's key handlers answer `{"error": "<message>"}` (and `code`): clients test `"..." in body["error"]`.
    assert again.json() == {"error": again.json()["error"], "code": "not_found", "type": "not_found_error"}
    assert "not found" in again.json()["error"]
    for body in ({"name": "k", "color": "blue"}, {"name": 5}, {"name": "k", "labels": {"bad key!": "v"}}):
        r = await api(world, "POST", "/v1/api-keys", token=bearer, json=body)
        assert r.status_code == 400, (body, r.status_code)  # schema errors are 400, as in the reference
        assert r.json()["type"] == "invalid_request_error" and r.json()["code"] == "invalid_request"
        assert isinstance(r.json()["error"], str)
    r = await api(world, "GET", "/v1/api-keys/config")
    assert r.status_code == 401 and r.json()["type"] == "authentication_error" and r.json()["code"] == "unauthenticated"
    # The reference's subscription and model handlers answer the OpenAI envelope, and so does maas-api there.
    r = await api(world, "GET", "/v1/subscriptions")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert r.json()["error"]["type"] == "authentication_error"
    r = await api(world, "GET", "/v1/api-keys", token=bearer, headers={"X-MaaS-Username": "root"})
    assert r.status_code == 403 and r.json()["code"] == "forbidden_header" and isinstance(r.json()["error"], str)
