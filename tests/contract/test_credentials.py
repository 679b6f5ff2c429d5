"""The one `Authorization` parser of the gateway and maas-api (RFC 9110: the scheme is case-insensitive)."""

from __future__ import annotations

import pytest

from maasctl.contract.credentials import bearer_credential, canonical_authorization
from maasctl.contract.edge import presented_credential


@pytest.mark.parametrize("header", [
    "Bearer sk-oai-abc", "bearer sk-oai-abc", "BEARER sk-oai-abc", "bEaReR sk-oai-abc", "Bearer   sk-oai-abc",
    " Bearer sk-oai-abc ", b"bearer sk-oai-abc",
])
def test_any_spelling_of_the_scheme_presents_the_same_credential(header: str | bytes) -> None:
    assert bearer_credential(header) == "sk-oai-abc"
    if isinstance(header, str):
        assert canonical_authorization(header) == "Bearer sk-oai-abc"
        assert presented_credential(header, None) == "sk-oai-abc"


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", "Bearer    ", "Bearersk-oai-abc", "Basic dXNlcjpwYXNz", "Token sk-oai-abc",
    "Bearer a b", "Bearer a, Bearer b", "Bearer a,b", "Bearer\tsk-oai-abc", "Bearer sk-oai-abc\tx",
])
def test_no_credential_unless_exactly_one_token_follows_the_scheme(header: str | None) -> None:
    assert bearer_credential(header) is None
    assert presented_credential(header, None) is None


def test_other_schemes_are_compared_the_same_way_and_left_as_they_are() -> None:
    assert bearer_credential("apikey s3cret", "APIKEY") == "s3cret"
    assert bearer_credential("Bearer s3cret", "APIKEY") is None
    assert canonical_authorization("Basic dXNlcjpwYXNz") == "Basic dXNlcjpwYXNz"
    assert canonical_authorization("bearer a b") == "bearer a b"  # no credential: nothing to canonicalize
