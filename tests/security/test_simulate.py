"""`/_gateway/simulate` over HTTP against the real local stack: a caller sees its own verdict and counters, an
administrator anyone's, nobody else; any body is answered 400 or served, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from e2e.conftest import World

from maasctl.tls import default_tls
from tests.security.test_edge import served_model

DEEP = [
    b"[" * 5000 + b"]" * 5000,
    b"{" * 129 + b"}" * 129,
    b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b'{"model":' + b"[" * 20000 + b"]" * 20000 + b"}",
    b'{"model":"m","user":"alice","groups":' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"model":"m","key":' + b'{"k":' * 1500 + b"1" + b"}" * 1500 + b"}",
    b"[" * 30000,  # never closed
]
MALFORMED = [
    b"", b"[]", b'["model"]', b'"x"', b"1", b"null", b"not json", b"\xef\xbb\xbf{}", b'{"model":"m"} x',
    b'{"model":"\xff"}', b'{"model":1,"user":"alice"}', b'{"model":"m","user":5}', b'{"model":"m","key":[]}',
    b'{"model":"m","token":{}}', b'{"model":"m","user":"alice","groups":"admins"}',
    b'{"model":"m","user":"alice","groups":[1]}', b'{"model":"m","user":"alice","host":[]}',
    b'{"model":"m","key":"k","subscription":7}', b'{"model":"m","key":"k","endpoint":{}}',
    b'{"model":"m","user":"alice","extra":1}', b'{"model":"m"}', b'{"model":"m","user":"a","key":"b"}',
]


async def _simulate(world: World, body: bytes | dict[str, Any], authorization: str | None = None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        return await http.post("/_gateway/simulate", content=content, headers=headers)


@pytest.mark.parametrize("body", DEEP + MALFORMED)
async def test_any_simulate_body_is_answered_400_never_500(world: World, body: bytes) -> None:
    """Deep nesting (arrays, objects, in any field, never closed), non-objects and fields of the wrong type are
    a clean 400 `invalid_request`, whoever asks."""
    for authorization in (None, f"Bearer {world.token('alice')}", world.admin_headers()["Authorization"]):
        r = await _simulate(world, body, authorization)
        assert r.status_code == 400, (body[:60], r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "invalid_request"


async def test_only_an_administrator_sees_another_users_verdict_and_counters(world: World) -> None:
    """Simulating a user and groups (an identity nobody proved) needs an administrator's Kubernetes token: no
    credential is 401, an invalid token 401, another user's token or an API key 403 (alice asking about bob,
    bob about himself by name), and nothing of the verdict or the counters is in the refusal."""
    key = await served_model(world)
    ask = {"model": f"{world.namespace}/gpt", "user": world.username("alice"), "groups": ["system:authenticated"]}
    refusals = {
        None: 401, "": 401, "Bearer": 401, "Basic YWxpY2U6cHc=": 401, "Bearer not-a-token": 401,
        f"Bearer {world.token('bob')}": 403, f"Bearer {world.token('alice')}": 403,
        f"Bearer {world.token('carol')}": 403, f"Bearer {key}": 403,
    }
    for authorization, status in refusals.items():
        r = await _simulate(world, ask, authorization)
        assert r.status_code == status, (authorization, r.status_code, r.text)
        assert "limits" not in r.text and "subscription" not in r.text and world.namespace not in r.text
    bob_about_bob = {**ask, "user": world.username("bob")}
    assert (await _simulate(world, bob_about_bob, f"Bearer {world.token('bob')}")).status_code == 403

    admin = world.admin_headers()["Authorization"]
    for authorization in (admin, "bearer " + admin.split(" ", 1)[1], "BEARER  " + admin.split(" ", 1)[1]):
        r = await _simulate(world, ask, authorization)
        assert r.status_code == 200, (authorization[:10], r.text)
        report = r.json()
        assert report["status"] == 200 and report["limits"] and "used" in report["limits"][0], report


async def test_a_caller_simulates_with_its_own_credential(world: World) -> None:
    """A key or a token in the request is the very credential simulated: its holder sees its own verdict and
    counters without anything more; a credential that is not valid is simulated as the 401 it would get and
    shows no counters."""
    key = await served_model(world)
    model = f"{world.namespace}/gpt"
    for body in ({"model": model, "key": key}, {"model": model, "token": world.token("alice")}):
        r = await _simulate(world, body)
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["status"] == 200 and report["limits"], report
    for body in ({"model": model, "key": "sk-oai-forged"}, {"model": model, "token": "not-a-token"}):
        r = await _simulate(world, body)
        assert r.status_code == 200 and r.json()["status"] in (401, 403) and r.json()["limits"] == []
