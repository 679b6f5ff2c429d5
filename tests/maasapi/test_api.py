"""The HTTP API end to end (in-process ASGI) on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
import structlog
from sqlalchemy import func, select

from maasctl.maasapi.auth import Identity
from maasctl.maasapi.db import api_key_events, api_key_labels, api_keys
from maasctl.maasapi.store import KeyStore
from tests.error_fields import error_code, error_message

from .conftest import GW, NS, USERS, Clock, auth


async def mint(client: httpx.AsyncClient, user: str = "alice", **body: Any) -> dict[str, Any]:
    body.setdefault("name", "my-key")
    r = await client.post("/v1/api-keys", json=body, headers=auth(user))
    assert r.status_code == 201, r.text
    data: dict[str, Any] = r.json()
    return data


async def validate(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    r = await client.post("/internal/v1/api-keys/validate", json={"key": key}, headers=GW)
    assert r.status_code == 200
    data: dict[str, Any] = r.json()
    return data


async def counts(store: KeyStore) -> tuple[int, int, int]:
    async with store.engine.connect() as conn:
        n = [(await conn.execute(select(func.count()).select_from(t))).scalar_one()
             for t in (api_keys, api_key_labels, api_key_events)]
    return n[0], n[1], n[2]


async def test_mint_validate_and_show_once(client: httpx.AsyncClient, store: KeyStore, clock: Clock) -> None:
    created = await mint(client, labels={"team": "ml"}, description="d", expiresIn="7d")
    assert created["key"].startswith("sk-oai-") and created["subscription"] == "premium"
    assert created["keyPrefix"] == f"sk-oai-{created['id'][:12]}..."
    assert datetime.fromisoformat(created["expiresAt"]) - datetime.fromisoformat(created["createdAt"]) == \
        timedelta(days=7)
    v = await validate(client, created["key"])
    assert v == {"valid": True, "reason": None, "userId": created["id"], "username": "alice",
                 "groups": ["premium-users", "system:authenticated"], "keyId": created["id"], "keyName": "my-key",
                 "subscription": f"{NS}/premium", "labels": {"team": "ml"}}
    shown = (await client.get(f"/v1/api-keys/{created['id']}", headers=auth("alice"))).json()
    assert "key" not in shown and created["key"] not in str(shown)
    assert shown["status"] == "active" and shown["labels"] == {"team": "ml"} and shown["username"] == "alice"
    listed = (await client.get("/v1/api-keys", headers=auth("alice"))).json()
    assert [k["id"] for k in listed["data"]] == [created["id"]] and listed["object"] == "list"
    assert created["key"] not in str(listed)


async def test_mint_named_subscription_and_default_tie_break(client: httpx.AsyncClient) -> None:
    assert (await mint(client, subscription="free"))["subscription"] == "free"
    assert (await mint(client, "bob"))["subscription"] == "other-ns/bobs"  # "broken" is Failed
    assert (await mint(client, "carol"))["subscription"] == "everyone"  # "*" owner


@pytest.mark.parametrize(
    ("user", "body", "status", "code"),
    [
        ("carol", {"name": "k", "subscription": "premium"}, 400, "invalid_subscription"),
        ("carol", {"name": "k", "subscription": "no-such-sub"}, 400, "invalid_subscription"),
        ("bob", {"name": "k", "subscription": "broken"}, 403, "subscription_not_ready"),
        ("alice", {"name": "k", "expiresIn": "91d"}, 400, "invalid_expiration"),
        ("alice", {"name": "k", "expiresIn": "tomorrow"}, 400, "invalid_expiration"),
        ("alice", {"name": "k", "expiresIn": "0d"}, 400, "invalid_expiration"),
        ("alice", {"ephemeral": True, "expiresIn": "2h"}, 400, "invalid_expiration"),
        ("alice", {"description": "no name"}, 400, "invalid_request"),
        ("alice", {"name": "k", "color": "blue"}, 400, "invalid_request"),
        ("alice", {"name": "k", "labels": {"bad key!": "v"}}, 400, "invalid_request"),
        ("alice", {"name": "k", "labels": {f"k{i}": "v" for i in range(51)}}, 400, "invalid_request"),
        ("alice", {"name": "x" * 129}, 400, "invalid_request"),
        ("alice", {"name": "k", "expiresIn": 30.5}, 400, "invalid_request"),
        ("alice", {"name": "k", "expiresIn": 0}, 400, "invalid_expiration"),
        ("alice", {"name": "k", "expiresIn": True}, 400, "invalid_request"),
        ("alice", {"name": "k", "subscription": "UPPER/Case"}, 400, "invalid_request"),
    ],
)
async def test_mint_bad_input_is_4xx_with_code_and_stores_nothing(
    client: httpx.AsyncClient, store: KeyStore, user: str, body: dict[str, Any], status: int, code: str,
) -> None:
    r = await client.post("/v1/api-keys", json=body, headers=auth(user))
    assert r.status_code == status, r.text
    assert error_code(r) == code
    assert error_message(r)
    assert await counts(store) == (0, 0, 0)


async def test_malformed_json_and_wrong_content(client: httpx.AsyncClient, store: KeyStore) -> None:
    r = await client.post("/v1/api-keys", content=b'{"name": ', headers={**auth("alice"),
                                                                       "content-type": "application/json"})
    assert r.status_code == 400 and error_code(r) == "invalid_json"
    r = await client.post("/v1/api-keys", content=b"[1, 2]", headers={**auth("alice"),
                                                                     "content-type": "application/json"})
    assert r.status_code == 400 and error_code(r) == "invalid_request"
    assert await counts(store) == (0, 0, 0)


async def test_oversized_body_rejected(client: httpx.AsyncClient, store: KeyStore) -> None:
    big = {"name": "k", "description": "x" * 5000}
    r = await client.post("/v1/api-keys", json=big, headers=auth("alice"))
    assert r.status_code == 413 and error_code(r) == "request_too_large"

    async def chunks() -> Any:  # no content-length: streamed, counted while reading
        for _ in range(10):
            yield b" " * 1000

    r = await client.post("/v1/api-keys", content=chunks(), headers={**auth("alice"),
                                                                     "content-type": "application/json"})
    assert r.status_code == 413 and error_code(r) == "request_too_large"
    assert await counts(store) == (0, 0, 0)


async def test_authentication_required(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                    {"Authorization": "Bearer sk-oai-garbage"}):
        r = await client.get("/v1/api-keys", headers=headers)
        assert r.status_code == 401 and error_code(r) == "unauthenticated"


async def test_unknown_route_and_method_are_json(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/nope")
    assert r.status_code == 404 and error_code(r) == "not_found"
    r = await client.put("/v1/api-keys", headers=auth("alice"))
    assert r.status_code == 405 and error_code(r) == "method_not_allowed"


async def test_validate_never_leaks_existence(client: httpx.AsyncClient, clock: Clock) -> None:
    created = await mint(client)
    key_id = created["id"]
    wrong_secret = f"sk-oai-{key_id}_{'A' * 43}"
    unknown = f"sk-oai-{'B' * 22}_{'A' * 43}"
    for key in (wrong_secret, unknown, "garbage", ""):
        assert await validate(client, key) == {"valid": False, "reason": "invalid_key", "userId": None,
                                               "username": None, "groups": None, "keyId": None, "keyName": None,
                                               "subscription": None, "labels": None}
    r = await client.post("/internal/v1/api-keys/validate", json={"key": "x" * 300}, headers=GW)
    assert r.status_code == 400


async def test_revoked_and_expired_keys_stop_working(client: httpx.AsyncClient, clock: Clock) -> None:
    a = await mint(client)
    b = await mint(client, expiresIn="1h")
    r = await client.delete(f"/v1/api-keys/{a['id']}", params={"reason": "leaked"}, headers=auth("alice"))
    assert r.status_code == 200 and r.json()["status"] == "revoked" and r.json()["revokeReason"] == "leaked"
    assert (await validate(client, a["key"]))["reason"] == "revoked"
    assert (await client.get("/v1/subscriptions", headers={"Authorization": f"Bearer {a['key']}"})).status_code \
        == 401
    assert (await validate(client, b["key"]))["valid"]
    clock.advance(timedelta(hours=1, seconds=1))
    assert (await validate(client, b["key"])) ["reason"] == "expired"
    expired = (await client.get(f"/v1/api-keys/{b['id']}", headers=auth("alice"))).json()
    assert expired["status"] == "expired"
    # revoking again is 404 (as in the reference); the first revocation's audit data stays
    r = await client.delete(f"/v1/api-keys/{a['id']}", params={"reason": "again"}, headers=auth("alice"))
    assert r.status_code == 404 and error_code(r) == "not_found"
    shown = (await client.get(f"/v1/api-keys/{a['id']}", headers=auth("alice"))).json()
    assert shown["status"] == "revoked" and shown["revokeReason"] == "leaked"


async def test_other_users_keys_are_404_admin_sees_them(client: httpx.AsyncClient) -> None:
    a = await mint(client)
    for method in ("GET", "DELETE"):
        r = await client.request(method, f"/v1/api-keys/{a['id']}", headers=auth("bob"))
        assert r.status_code == 404 and error_code(r) == "not_found"
        r = await client.request(method, f"/v1/api-keys/{'Z' * 22}", headers=auth("bob"))
        assert r.status_code == 404
    assert (await validate(client, a["key"]))["valid"]
    assert (await client.get("/v1/api-keys", headers=auth("bob"))).json()["data"] == []
    assert (await client.get(f"/v1/api-keys/{a['id']}", headers=auth("admin"))).json()["username"] == "alice"
    r = await client.delete(f"/v1/api-keys/{a['id']}", headers=auth("admin"))
    assert r.status_code == 200 and r.json()["revokedBy"] == "admin"


async def test_api_keys_cannot_manage_keys(client: httpx.AsyncClient) -> None:
    a = await mint(client)
    h = {"Authorization": f"Bearer {a['key']}"}
    for method, path in (("POST", "/v1/api-keys"), ("GET", "/v1/api-keys"), ("GET", f"/v1/api-keys/{a['id']}"),
                         ("DELETE", f"/v1/api-keys/{a['id']}"), ("POST", "/v1/api-keys/bulk-revoke")):
        r = await client.request(method, path, headers=h, json={"name": "x"} if method == "POST" else None)
        assert r.status_code == 403 and error_code(r) == "api_key_not_allowed", (method, path)


async def test_search_filters_and_pagination(client: httpx.AsyncClient) -> None:
    made = [await mint(client, name=f"k{i}", labels={"i": str(i % 2)}) for i in range(5)]
    await mint(client, name="eph", ephemeral=True)
    await mint(client, "bob", name="bob-key")
    await client.delete(f"/v1/api-keys/{made[0]['id']}", headers=auth("alice"))

    async def search(user: str = "alice", **body: Any) -> httpx.Response:
        return await client.post("/v1/api-keys/search", json=body, headers=auth(user))

    r = (await search(pagination={"limit": 2})).json()
    assert len(r["data"]) == 2 and r["has_more"] is True
    r = (await search(pagination={"limit": 2, "offset": 2})).json()  # active keys only by default: k1..k4
    assert len(r["data"]) == 2 and r["has_more"] is False
    r = (await search(filters={"status": ["active", "revoked", "expired"]}, pagination={"limit": 2, "offset": 4}))
    assert len(r.json()["data"]) == 1
    r = (await search(filters={"status": ["revoked"]})).json()
    assert [k["name"] for k in r["data"]] == ["k0"]
    for labels in ({"labelsContain": {"i": "1"}}, {"labels": {"i": "1"}}):  # the reference's name, and ours
        r = (await search(filters=labels, sort={"by": "name", "order": "asc"})).json()
        assert [k["name"] for k in r["data"]] == ["k1", "k3"]
    both = await search(filters={"labelsContain": {"i": "1"}, "labels": {"i": "0"}})
    assert both.status_code == 400
    r = (await search(filters={"includeEphemeral": True, "nameContains": "ep"})).json()
    assert [k["name"] for k in r["data"]] == ["eph"]
    r = (await search(filters={"subscription": "free"})).json()
    assert r["data"] == []
    bad = await search(filters={"username": "bob"})
    assert bad.status_code == 403 and error_code(bad) == "forbidden"
    r = (await search("admin", filters={"username": "bob"})).json()
    assert [k["name"] for k in r["data"]] == ["bob-key"]
    assert len((await search("admin", pagination={"limit": 100})).json()["data"]) == 5  # the active ones
    for body in ({"pagination": {"limit": 101}}, {"filters": {"status": ["gone"]}}, {"sort": {"by": "id"}},
                 {"filters": {"unknown": 1}}, {"page": 1}):
        r = await search(**body)
        assert r.status_code == 400 and error_code(r) == "invalid_request", body


async def test_bulk_revoke_rules_and_dry_run(client: httpx.AsyncClient, store: KeyStore) -> None:
    a1, a2 = await mint(client), await mint(client, subscription="free")
    b1 = await mint(client, "bob")

    async def bulk(user: str, **body: Any) -> httpx.Response:
        return await client.post("/v1/api-keys/bulk-revoke", json=body, headers=auth(user))

    r = await bulk("bob", username="alice")
    assert r.status_code == 403 and error_code(r) == "forbidden"
    r = await bulk("alice", subscription="free")
    assert r.status_code == 403
    r = (await bulk("alice", username="alice", dryRun=True)).json()
    assert r == {"revokedCount": 2, "dryRun": True, "message": r["message"]}  # counts only, no key ids
    assert (await validate(client, a1["key"]))["valid"]
    r = (await bulk("admin", subscription=f"{NS}/free", reason="plan ended")).json()
    assert r["revokedCount"] == 1 and not r["dryRun"]
    assert (await validate(client, a2["key"]))["reason"] == "revoked"
    assert (await validate(client, a1["key"]))["valid"]
    for empty in ({}, {"dryRun": False}, {"reason": "x"}):  # an empty filter never revokes anything
        r = await bulk("alice", **empty)
        assert r.status_code == 400 and error_code(r) == "invalid_request", empty
    assert (await validate(client, a1["key"]))["valid"]
    r = (await bulk("alice", username="alice")).json()
    assert r["revokedCount"] == 1
    assert (await validate(client, a1["key"]))["reason"] == "revoked"
    assert (await validate(client, b1["key"]))["valid"]
    assert [e.action for e in await store.events(a2["id"])] == ["minted", "bulk_revoked"]
    r = (await bulk("admin", username="bob")).json()
    assert r["revokedCount"] == 1
    assert (await validate(client, b1["key"]))["reason"] == "revoked"


async def test_subscriptions_for_token_and_key(client: httpx.AsyncClient) -> None:
    r = (await client.get("/v1/subscriptions", headers=auth("alice"))).json()
    assert [s["subscription_id_header"] for s in r] == ["premium", "free", "everyone"]
    premium = r[0]
    assert premium["priority"] == 10 and premium["phase"] == "Active" and premium["namespace"] == NS
    assert premium["subscription_description"] == "premium"
    assert premium["model_refs"][0] == {"name": "granite", "namespace": "llm", "unlimited": False,
                                        "token_rate_limits": [{"limit": 50000, "window": "1m"}]}
    key = await mint(client, subscription="free")
    r = (await client.get("/v1/subscriptions", headers={"Authorization": f"Bearer {key['key']}"})).json()
    # as in the reference, a key lists its user's subscriptions (it still only ever uses its own: test_select)
    assert [s["subscription_id_header"] for s in r] == ["premium", "free", "everyone"]
    r = (await client.get("/v1/subscriptions", headers=auth("carol"))).json()
    assert [s["subscription_id_header"] for s in r] == ["everyone"]
    r = (await client.get("/v1/subscriptions", headers=auth("bob"))).json()
    assert "other-ns/bobs" in [s["subscription_id_header"] for s in r]  # outside the namespace: ns/name


async def test_select_callback(client: httpx.AsyncClient) -> None:
    async def select_(**body: Any) -> dict[str, Any]:
        r = await client.post("/internal/v1/subscriptions/select", json=body, headers=GW)
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data

    alice = {"username": "alice", "groups": ["premium-users"]}
    # premium (priority 10) beats free (0): a token caller without the header is served by priority
    r = await select_(**alice, requestedModel="llm/granite", requestedSubscription="", keySubscription="")
    assert r["selected"] and (r["name"], r["namespace"]) == ("premium", NS) and "error" not in r
    tie = await select_(username="dave", groups=["tie-a", "tie-b"], requestedModel="llm/granite")
    assert not tie["selected"] and tie["error"] == "multiple_subscriptions" and "name" not in tie
    assert tie["candidates"] == [f"{NS}/tie-a", f"{NS}/tie-b"] and f"{NS}/tie-a" in tie["message"]
    r = await select_(**alice, requestedModel="llm/granite", requestedSubscription="free")
    assert r["selected"] and r["subscription"]["id"] == f"{NS}/free"
    assert (r["name"], r["namespace"]) == ("free", NS) and "error" not in r
    r = await select_(**alice, model="llm/granite", keySubscription=f"{NS}/free")
    assert r["subscription"]["id"] == f"{NS}/free"  # a key is served by its bound subscription
    for header in ("premium", f"{NS}/premium", "no-such"):  # ... and a header cannot switch it: it is ignored
        r = await select_(**alice, model="llm/granite", keySubscription=f"{NS}/free", requestedSubscription=header)
        assert r["selected"] and r["subscription"]["id"] == f"{NS}/free", header
    r = await select_(**alice, model="llm/llama")
    assert r["subscription"]["id"] == f"{NS}/premium"
    r = await select_(username="carol", groups=[], model="llm/granite")
    assert r["error"] == "not_found" and r["message"]
    bad = await client.post("/internal/v1/subscriptions/select", json={"groups": []}, headers=GW)
    assert bad.status_code == 400


async def test_subscription_scoped_revocation(client: httpx.AsyncClient) -> None:
    a = await mint(client, subscription="free")
    b = await mint(client, subscription="premium")
    path = f"/internal/v1/subscriptions/{NS}/free/api-keys"
    assert (await client.delete(path, headers=auth("alice"))).status_code == 403
    assert (await client.delete(path)).status_code == 401
    r = await client.delete(path, headers=auth("admin"))
    assert r.status_code == 200 and r.json() == {"subscription": f"{NS}/free", "revokedCount": 1}
    assert (await validate(client, a["key"]))["reason"] == "revoked"
    assert (await validate(client, b["key"]))["valid"]


async def test_ephemeral_keys_short_lived_and_hidden(client: httpx.AsyncClient) -> None:
    e = await mint(client, ephemeral=True, name=None)
    assert e["ephemeral"] and e["name"].startswith("ephemeral-")
    assert datetime.fromisoformat(e["expiresAt"]) - datetime.fromisoformat(e["createdAt"]) == timedelta(hours=1)
    assert (await client.get("/v1/api-keys", headers=auth("alice"))).json()["data"] == []
    listed = (await client.get("/v1/api-keys", params={"includeEphemeral": "true"}, headers=auth("alice"))).json()
    assert [k["id"] for k in listed["data"]] == [e["id"]]
    cfg = (await client.get("/v1/api-keys/config", headers=auth("alice"))).json()
    assert cfg == {"max_expiration_days": 90.0, "default_expiration": "90d", "ephemeral_max_expiration": "1h",
                   "key_format": "sk-oai-<id>_<secret>"}


async def test_metrics_and_access_log_without_secrets(client: httpx.AsyncClient) -> None:
    with structlog.testing.capture_logs() as logs:
        created = await mint(client)
        await validate(client, created["key"])
        await client.get(f"/v1/api-keys/{created['id']}", headers=auth("alice"))
    access = [entry for entry in logs if entry.get("event") == "request"]
    assert {(e["method"], e["route"], e["status"]) for e in access} >= {
        ("POST", "/v1/api-keys", 201), ("POST", "/internal/v1/api-keys/validate", 200),
        ("GET", "/v1/api-keys/{key_id}", 200)}
    assert any(e["user"] == "alice" for e in access)
    dump = repr(logs)
    secret = created["key"].split("_", 1)[1]
    assert secret not in dump and "alice-token" not in dump
    text = (await client.get("/metrics")).text
    assert 'maas_api_http_requests_total{method="POST",route="/v1/api-keys",status="201"} 1.0' in text
    assert 'maas_api_key_validation_total{result="valid"} 1.0' in text
    assert 'maas_api_key_mint_total{result="success"} 1.0' in text
    assert secret not in text


async def test_health_and_openapi(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "healthy"}
    doc = (await client.get("/openapi.json")).json()
    assert "/v1/api-keys" in doc["paths"] and "/internal/v1/api-keys/validate" in doc["paths"]


def test_checked_in_openapi_document_is_current() -> None:
    from maasctl.maasapi import openapi

    assert openapi.DOCUMENT_PATH.read_text() == openapi.render(), \
        "run `python -m maasctl.maasapi.openapi` to refresh src/maasctl/maasapi/openapi.json"


async def test_cleanup_purges_only_after_retention(client: httpx.AsyncClient, clock: Clock, store: KeyStore) -> None:
    old = await mint(client)
    keep = await mint(client)
    await client.delete(f"/v1/api-keys/{old['id']}", headers=auth("alice"))
    assert (await client.post("/internal/v1/api-keys/cleanup", headers=auth("alice"))).status_code == 403
    r = await client.post("/internal/v1/api-keys/cleanup", headers=auth("admin"))
    assert r.json()["purgedCount"] == 0  # revoked just now: still inside the audit retention period
    clock.advance(timedelta(days=31))
    r = await client.post("/internal/v1/api-keys/cleanup", headers=auth("admin"))
    assert r.json()["purgedCount"] == 1
    assert await store.get(old["id"]) is None and await store.get(keep["id"]) is not None


async def test_validate_route_errors_are_json_with_codes(client: httpx.AsyncClient) -> None:
    path = "/internal/v1/api-keys/validate"
    r = await client.post(path, content=b"{", headers={"content-type": "application/json", **GW})
    assert r.status_code == 400 and error_code(r) == "invalid_json"
    r = await client.post(path, json={"key": "k", "other": 1}, headers=GW)
    assert r.status_code == 400 and r.json()["error"]["details"][0]["field"] == "other"
    r = await client.post(path, content=b"key=x", headers={"content-type": "application/x-www-form-urlencoded", **GW})
    assert r.status_code == 400
    r = await client.post(path, json={"key": "x" * 10_000})
    assert r.status_code == 413
    assert (await client.get(path)).status_code == 405


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer alice-token"},
     {"Authorization": "gw-test-token"}, {"Authorization": "Basic gw-test-token"},
     {"Authorization": "Bearer gw-test-tokenX"}, {"Authorization": "Bearer "}, {"X-Api-Key": "gw-test-token"}],
    ids=["none", "wrong", "user-token", "no-scheme", "basic", "longer", "empty", "other-header"],
)
async def test_internal_gateway_endpoints_need_the_gateway_token(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    """Closed by default: only the gateway's shared token opens validate, select and usage ingestion."""
    calls = [("/internal/v1/api-keys/validate", {"key": "sk-oai-x_y"}),
             ("/internal/v1/subscriptions/select", {"username": "alice", "groups": ["premium-users"]}),
             ("/internal/v1/usage", {"records": []})]
    for path, body in calls:
        r = await client.post(path, json=body, headers=headers)
        assert r.status_code == 401, (path, r.text)
        assert "sk-oai" not in r.text and "premium" not in r.text  # nothing about keys or subscriptions leaks
    text = (await client.get("/metrics")).text
    for endpoint in ("validate", "select", "usage"):
        assert f'maas_api_internal_unauthenticated_total{{endpoint="{endpoint}"}} 1.0' in text
    for path, body in calls[:2]:
        assert (await client.post(path, json=body, headers=GW)).status_code == 200


async def test_a_key_outlives_a_group_membership_change_by_a_bounded_time(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    """Keys carry the owner's groups from mint. The owner's next token call refreshes them at once; without
    one, the key is refused once its groups are older than `key_groups_max_age` (24 h by default)."""
    created = await mint(client, subscription="premium")  # alice is in premium-users
    assert (await validate(client, created["key"]))["groups"] == ["premium-users", "system:authenticated"]
    clock.advance(timedelta(hours=23))
    assert (await validate(client, created["key"]))["valid"]
    clock.advance(timedelta(hours=2))  # 25 h without the owner confirming her groups
    stale = await validate(client, created["key"])
    assert stale["valid"] is False and stale["reason"] == "groups_stale"
    # alice signs in again (any token call) after leaving premium-users: the key gets her groups of now,
    # so the premium subscription no longer entitles it (the select callback refuses it).
    USERS["alice-token"] = Identity("alice", ("system:authenticated",))
    try:
        assert (await client.get("/v1/api-keys", headers=auth("alice"))).status_code == 200
        fresh = await validate(client, created["key"])
        assert fresh["valid"] and fresh["groups"] == ["system:authenticated"]
        select = await client.post("/internal/v1/subscriptions/select", headers=GW, json={
            "username": "alice", "groups": fresh["groups"], "keySubscription": fresh["subscription"],
            "requestedModel": "llm/granite"})
        assert select.json()["error"] == "not_found"
    finally:
        USERS["alice-token"] = Identity("alice", ("premium-users", "system:authenticated"))
