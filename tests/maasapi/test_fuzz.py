"""Property test over the OpenAPI surface: arbitrary JSON bodies and path values never cause a 5xx and
never store anything half-way (runs on SQLite only: it is about the HTTP layer, not the database)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.error_fields import error_code

from .conftest import auth

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
FIELDS = ["name", "description", "subscription", "expiresIn", "ephemeral", "labels", "key", "filters", "sort",
          "pagination", "username", "groups", "dryRun", "reason", "requestedSubscription", "keySubscription",
          "model", "status", "limit"]
bodies = json_values | st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
ENDPOINTS = [("POST", "/v1/api-keys"), ("POST", "/v1/api-keys/search"), ("POST", "/v1/api-keys/bulk-revoke"),
             ("POST", "/internal/v1/api-keys/validate"), ("POST", "/internal/v1/subscriptions/select")]
PATHS = ["/v1/api-keys/{}", "/internal/v1/subscriptions/{}/x/api-keys"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoint=st.sampled_from(ENDPOINTS), body=bodies, user=st.sampled_from(["alice", "admin", "nobody"]))
async def test_no_5xx_for_arbitrary_bodies(client: httpx.AsyncClient, endpoint: tuple[str, str], body: Any,
                                           user: str) -> None:
    method, path = endpoint
    r = await client.request(method, path, content=json.dumps(body).encode(),
                             headers={**auth(user), "content-type": "application/json"})
    assert r.status_code < 500, (path, body, r.text)
    if r.status_code >= 400:  # every refusal names its code, in the envelope of its endpoint
        assert error_code(r), (path, body, r.text)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(PATHS), value=st.text(min_size=1, max_size=80), method=st.sampled_from(
    ["GET", "DELETE", "POST"]))
async def test_no_5xx_for_arbitrary_path_values(client: httpx.AsyncClient, template: str, value: str,
                                                method: str) -> None:
    from urllib.parse import quote

    r = await client.request(method, template.format(quote(value, safe="")), headers=auth("admin"))
    assert r.status_code < 500, (template, value, r.text)


@given(body=bodies | st.fixed_dictionaries({"key": st.text(max_size=300)}) | st.fixed_dictionaries(
    {"key": st.text(max_size=10)}, optional={"extra": json_values}))
def test_validate_fast_path_agrees_with_the_pydantic_contract(body: Any) -> None:
    """The hand-written hot-path parser accepts and rejects exactly what `ValidateRequest` does."""
    from pydantic import ValidationError

    from maasctl.maasapi.fastpath import parse_validate_body
    from maasctl.maasapi.schemas import ValidateRequest

    raw = json.dumps(body).encode()
    try:
        expected = 200
        ValidateRequest.model_validate(json.loads(raw))
    except ValidationError:
        expected = 400
    status, result = parse_validate_body(raw, True)
    assert status == expected, (body, result)
    if status == 200:
        assert result == body["key"]


def test_validate_fast_path_rejects_non_json() -> None:
    from maasctl.maasapi.fastpath import parse_validate_body

    assert parse_validate_body(b'{"key": ', True)[0] == 400
    assert parse_validate_body(b"\xff\xfe", True)[0] == 400
    assert parse_validate_body(b'{"key": "x"}', False)[0] == 400
