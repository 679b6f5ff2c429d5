"""The identity the AuthPolicy exports, and the `x-maas-identity` header carrying it to the payload processor:
what is encoded is read back the same; anything else (forged, corrupted, oversized, smuggling extra keys) is
refused whole, never read as a partial identity."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import COUNTER_EXPRESSION, subscription_predicate
from maasctl.contract import identity as ids
from maasctl.contract.errors import Refusal, error_body

IDENTITY = {"userid": "alice", "groups": ["premium-users", "system:authenticated"], "groups_str": "x",
            "keyId": "k1", "selected_subscription": "premium", "selected_subscription_namespace": "maas",
            "selected_subscription_key": "maas/premium@llm/gpt", "organization_id": "acme",
            "subscription_info": {"name": "premium"}}
INFO = {"organizationId": "acme", "costCenter": "cc-7", "labels": {"tier": "gold", "team": "ml"}, "name": "premium"}


def raw(data: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


class TestNamedOnce:
    def test_the_names_are_the_identity_filter_the_limits_read(self) -> None:
        assert COUNTER_EXPRESSION == "auth.identity.userid"
        assert subscription_predicate(ObjectRef("s", "p"), ObjectRef("m", "g")).startswith(
            "auth.identity.selected_subscription_key == ")
        assert ids.subscription_of(IDENTITY) == "maas/premium"
        assert ids.subscription_of({}) == ""


class TestRoundTrip:
    @pytest.mark.parametrize("identity, info", [
        (IDENTITY, INFO),
        ({"userid": "system:serviceaccount:ns:sa"}, {}),  # a token: no key, no selection yet
        ({"userid": "ü" * 100, "groups": []}, {"labels": {}}),
        ({}, {"organizationId": "acme"}),
    ])
    def test_what_the_record_needs_comes_back(self, identity: dict[str, Any], info: dict[str, Any]) -> None:
        value = ids.encode_identity_header(identity, info)
        assert value.isascii() and "=" not in value and "\n" not in value  # one header-safe token
        carried = ids.decode_identity_header(value)
        assert carried.identity == {k: v for k, v in identity.items() if k in ids.IDENTITY_KEYS}
        assert carried.subscription_info == {k: v for k, v in info.items() if k != "name"}

    def test_values_past_the_bounds_are_cut_so_they_still_decode(self) -> None:
        carried = ids.decode_identity_header(ids.encode_identity_header(
            {"userid": "u" * 5000, "groups": [f"g{i}" for i in range(500)]},
            {"labels": {f"l{i:03}": "v" for i in range(500)}}))
        assert len(carried.identity["userid"]) == 1024 and len(carried.identity["groups"]) == 64
        assert len(carried.subscription_info["labels"]) == 64

    def test_non_strings_are_written_as_text(self) -> None:
        carried = ids.decode_identity_header(ids.encode_identity_header({"userid": 7, "keyId": None}, {}))
        assert carried.identity == {"userid": "7", "keyId": ""}


class TestGarbageIsRefused:
    @pytest.mark.parametrize("value", [
        "", "not base64!", "e30=" * 5000, "%%%", "YQ",  # "a": not JSON
        raw([1, 2]), raw("alice"), raw({"identity": "alice"}), raw({"identity": {}, "other": {}}),
        raw({"identity": {"userid": "alice", "is_admin": "true"}}),  # a key the contract does not carry
        raw({"identity": {"userid": 1}}), raw({"identity": {"groups": "admins"}}),
        raw({"identity": {"groups": [1]}}), raw({"identity": {"groups": ["g"] * 65}}),
        raw({"identity": {"userid": "x" * 1025}}),
        raw({"subscriptionInfo": {"labels": ["a"]}}), raw({"subscriptionInfo": {"labels": {"a": 1}}}),
        raw({"subscriptionInfo": {"costCenter": {"x": 1}}}), raw({"subscriptionInfo": {"name": "x"}}),
        base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("="),  # not UTF-8
        raw({"identity": {}}) + "\n",
    ])
    def test_anything_the_encoder_never_writes(self, value: str) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(value)

    def test_deep_nesting_is_refused_not_crashed(self) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(base64.urlsafe_b64encode(
                b'{"identity": {"userid": ' + b"[" * 4000 + b"]" * 4000 + b"}}").decode().rstrip("="))


class TestOneErrorBody:
    @pytest.mark.parametrize("status, kind", [(400, "invalid_request_error"), (401, "authentication_error"),
                                              (403, "permission_error"), (413, "invalid_request_error"),
                                              (429, "rate_limit_error"), (500, "api_error"), (503, "api_error")])
    def test_the_openai_shape_with_the_type_from_the_status(self, status: int, kind: str) -> None:
        assert json.loads(error_body(status, "why", "code_x")) == {
            "error": {"message": "why", "type": kind, "code": "code_x", "param": None}}

    def test_a_refusal_is_that_body_unless_a_policy_stated_its_own(self) -> None:
        assert Refusal(429, "rate_limited", "m", param="input").body == error_body(429, "m", "rate_limited", "input")
        assert Refusal(403, "forbidden", "m", raw_body=b"custom").body == b"custom"
