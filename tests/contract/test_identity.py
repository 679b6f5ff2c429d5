"""The identity the AuthPolicy exports, and the `x-maas-identity` header carrying it to the payload processor:
what is encoded is read back the same; anything else (forged, corrupted, oversized, smuggling extra keys) is
refused whole, never read as a partial identity."""

from __future__ import annotations

import json
from decimal import Decimal
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
    return json.dumps(data)


class TestNamedOnce:
    def test_the_names_are_the_identity_filter_the_limits_read(self) -> None:
        assert COUNTER_EXPRESSION == "auth.identity.userid"
        assert subscription_predicate(ObjectRef("s", "p"), ObjectRef("m", "g")).startswith(
            "auth.identity.selected_subscription_key == ")
        assert ids.subscription_of(IDENTITY) == "maas/premium"
        assert ids.subscription_of({}) == ""


FILTERS = {"billing": {"tenant": "acme", "keyLabels": {"project": "rag", "env": "prod"}},
           "guardrails": {"config": "maas/safety", "ready": True, "url": "http://g:8000", "timeoutSeconds": 2.5}}


def header(identity: Any = None, filters: Any = None, info: Any = None, **extra: Any) -> str:
    """A header as the encoder lays it out, with parts replaced (to build what it never writes)."""
    return raw({"identity": {} if identity is None else identity, "filters": {} if filters is None else filters,
                "subscriptionInfo": {} if info is None else info, **extra})


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


class TestRoundTrip:
    @pytest.mark.parametrize("identity, info, filters", [
        (IDENTITY, INFO, FILTERS),
        ({"userid": "system:serviceaccount:ns:sa"}, {}, {}),  # a token: no key, no selection yet
        ({"userid": "ü" * 100, "groups": []}, {"labels": {}}, {"billing": {"keyLabels": {}}}),
        ({}, {"organizationId": "acme"}, {"guardrails": None}),
    ])
    def test_the_filters_come_back_whole(self, identity: dict[str, Any], info: dict[str, Any],
                                         filters: dict[str, Any]) -> None:
        value = ids.encode_identity_header(identity, info, {"identity": {"ignored": "x"}, **filters})
        assert value.isascii() and "\n" not in value and "\r" not in value  # one header-safe value
        carried = ids.decode_identity_header(value)
        assert carried.identity == identity  # the identity filter whole (subscription_info, groups_str, ...)
        assert carried.filters == filters  # what the limits (auth.billing.keyLabels) and the rails read
        assert carried.subscription_info == {k: v for k, v in info.items() if k != "name"}

    def test_values_past_the_bounds_are_cut_so_they_still_decode(self) -> None:
        carried = ids.decode_identity_header(ids.encode_identity_header(
            {"userid": "u" * 5000, "groups": [f"g{i}" for i in range(300)],
             "groups_str": ",".join(f"g{i}" for i in range(300))},
            {"labels": {f"l{i:03}": "v" for i in range(500)}},
            {"billing": {"keyLabels": {f"k{i}": "v" * 2000 for i in range(3)}, "deep": nested(10)}}))
        assert len(carried.identity["userid"]) == 1024 and len(carried.identity["groups"]) == ids.MAX_GROUPS
        assert len(carried.subscription_info["labels"]) == 64
        assert {len(v) for v in carried.filters["billing"]["keyLabels"].values()} == {1024}
        kept, value = 0, carried.filters["billing"]["deep"]
        while isinstance(value, dict):
            kept, value = kept + 1, value["k"]
        assert (kept, value) == (ids.MAX_DEPTH - 1, None)  # under `billing`: the part past the depth is dropped

    def test_what_is_not_json_is_written_as_text_or_dropped(self) -> None:
        carried = ids.decode_identity_header(ids.encode_identity_header(
            {"userid": 7, "keyId": None}, {}, {"billing": {"price": Decimal("0.25"), "n": 2**60,
                                                           "nan": float("nan"), "t": ("a", 1)}}))
        assert carried.identity == {"userid": "7", "keyId": ""}
        assert carried.filters == {"billing": {"price": "0.25", "n": str(2**60), "nan": None, "t": ["a", 1]}}

    @pytest.mark.parametrize("filters", [{"bad name": {}}, {"": {}}, {f"f{i}": {} for i in range(17)}])
    def test_filter_names_that_are_not_ones_are_not_encoded(self, filters: dict[str, Any]) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.encode_identity_header({}, {}, filters)

    def test_a_whole_too_large_for_the_header_is_not_encoded(self) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.encode_identity_header({"groups": ["g" * 1024] * 64, "userid": "u"}, {"labels": {
                f"l{i}": "v" * 1024 for i in range(64)}}, {})


class TestAsAuthorinoWritesIt:
    def test_utf8_bytes_read_as_latin1_by_a_front_are_read_as_utf8(self) -> None:
        """Authorino writes the JSON unescaped, as UTF-8; Envoy carries bytes; our fronts read latin-1."""
        value = json.dumps({"identity": {"userid": "jürgen", "groups": ["ü-team"]}, "filters": {},
                            "subscriptionInfo": {"costCenter": "Zürich"}}, ensure_ascii=False)
        carried = ids.decode_identity_header(value.encode("utf-8").decode("latin-1"))
        assert carried.identity == {"userid": "jürgen", "groups": ["ü-team"]}
        assert carried.subscription_info == {"costCenter": "Zürich"}
        text = value.replace("jürgen", "łukasz")  # text beyond latin-1 cannot be bytes read as latin-1
        assert ids.decode_identity_header(text).identity["userid"] == "łukasz"

    def test_go_html_escapes_are_plain_json(self) -> None:
        value = '{"identity":{"userid":"a\\u003cb\\u003e\\u0026"},"filters":{},"subscriptionInfo":{}}'
        assert ids.decode_identity_header(value.replace("\\\\", "\\")).identity["userid"] == "a<b>&"


class TestGarbageIsRefused:
    """Each class of input the encoder never writes, with several variants."""

    @pytest.mark.parametrize("value", [
        "", "not json!", "{}" * 20_000, "%%%", "e30", header() + "x", header() + header(), "{",
        '{"identity": {}, "filters": {}, "subscriptionInfo": {}, "identity": 1',
        "\xff\xfe",  # bytes that are not UTF-8 (a front reads header bytes as latin-1)
        '{"identity":{"userid":"\xc3"},"filters":{},"subscriptionInfo":{}}',  # a cut UTF-8 sequence
    ])
    def test_not_json(self, value: str) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(value)

    @pytest.mark.parametrize("value", [
        raw([1, 2]), raw("alice"), raw(None),
        raw({"identity": {}, "subscriptionInfo": {}}),  # no filters: an authorizer that exports only the identity
        raw({"filters": {}, "subscriptionInfo": {}}), raw({"identity": {}, "filters": {}}),
        header(other={}), header(identity="alice"), header(filters=[]), header(info="acme"),
    ])
    def test_not_the_three_objects(self, value: str) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(value)

    @pytest.mark.parametrize("identity", [
        {"userid": 1}, {"keyId": None}, {"selected_subscription": ["a"]}, {"groups": "admins"},
        {"groups": [1]}, {"groups": ["g"] * (ids.MAX_GROUPS + 1)},
        {"groups_str": ["a"]}, {"groups_str": "g" * 300_000}, {"userid": "x" * 1025}, {f"k{i}": "v" for i in range(65)},
    ])
    def test_identity_keys_of_the_wrong_type_or_size(self, identity: dict[str, Any]) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(header(identity=identity))

    @pytest.mark.parametrize("filters", [
        {"identity": {}}, {"bad name": {}}, {"": {}}, {"x" * 64: {}}, {f"f{i}": {} for i in range(17)},
    ])
    def test_filter_names(self, filters: dict[str, Any]) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(header(filters=filters))

    @pytest.mark.parametrize("value", [
        "x" * 1025, ["a"] * 65, {f"k{i}": 1 for i in range(65)}, nested(ids.MAX_DEPTH + 1),
        [[[[[[[]]]]]]], {"k" * 1025: "v"}, 2**53 + 1, -(2**60),
    ])
    def test_filter_values_past_the_bounds(self, value: Any) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(header(filters={"billing": value}))

    @pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
    def test_numbers_json_does_not_have(self, number: bytes) -> None:
        value = b'{"identity": {}, "subscriptionInfo": {}, "filters": {"g": {"t": ' + number + b"}}}"
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(value.decode())

    @pytest.mark.parametrize("info", [
        {"labels": ["a"]}, {"labels": {"a": 1}}, {"costCenter": {"x": 1}}, {"name": "x"},
        {"labels": {f"l{i}": "v" for i in range(65)}}, {"organizationId": "o" * 1025},
    ])
    def test_subscription_info_outside_the_record_fields(self, info: dict[str, Any]) -> None:
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(header(info=info))

    @pytest.mark.parametrize("where", [b'"identity": {"userid": ', b'"filters": {"g": '])
    def test_deep_nesting_is_refused_not_crashed(self, where: bytes) -> None:
        value = b'{"subscriptionInfo": {}, ' + where + b"[" * 4000 + b"]" * 4000 + b"}}"
        with pytest.raises(ids.InvalidIdentityHeader):
            ids.decode_identity_header(value.decode())


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
