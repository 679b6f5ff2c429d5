"""Names, label values, opt-out: valid, stable, collision-resistant."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.builders import names
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import is_dns_subdomain

LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
SUBDOMAIN_CHARS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=300)


@pytest.mark.parametrize(
    ("fn", "model", "expected"),
    [
        pytest.param(names.trlp_name, "granite", "maas-trlp-granite", id="trlp"),
        pytest.param(names.authpolicy_name, "granite", "maas-auth-granite", id="authpolicy"),
        pytest.param(names.external_route_name, "gpt-4o", "maas-gpt-4o", id="external-route"),
        pytest.param(names.external_service_name, "gpt-4o", "maas-gpt-4o", id="external-service"),
    ],
)
def test_short_names_are_readable(fn: object, model: str, expected: str) -> None:
    assert fn(model) == expected  # type: ignore[operator]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("granite", "granite", id="valid-unchanged"),
        pytest.param("", "", id="empty-is-valid"),
        pytest.param("a" * 63, "a" * 63, id="max-length-unchanged"),
    ],
)
def test_label_value_keeps_valid_values(value: str, expected: str) -> None:
    assert names.label_value(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("a" * 64, id="too-long"),
        pytest.param("a/b", id="slash"),
        pytest.param("-lead", id="leading-dash"),
        pytest.param("trail.", id="trailing-dot"),
        pytest.param('"; drop', id="hostile"),
        pytest.param("ünïcode", id="unicode"),
        pytest.param("---", id="only-punctuation"),
    ],
)
def test_label_value_fixes_invalid_values(value: str) -> None:
    fixed = names.label_value(value)
    assert fixed != value
    assert len(fixed) <= 63 and LABEL_VALUE.fullmatch(fixed)


def test_long_names_are_truncated_with_hash() -> None:
    long = "m" * 300
    name = names.trlp_name(long)
    assert len(name) == 253 and name.startswith("maas-trlp-mmm") and is_dns_subdomain(name)
    assert name != names.trlp_name("m" * 299)


@given(SUBDOMAIN_CHARS)
def test_truncate_name_keeps_subdomains_valid(name: str) -> None:
    out = names.truncate_name(name)
    assert len(out) <= 253
    if len(name) <= 253:
        assert out == name
    else:
        assert out.endswith("-" + names.stable_hash(name))
        subdomain = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
        if re.fullmatch(subdomain, name) and re.fullmatch(subdomain, name[:242].rstrip("-.")):
            assert is_dns_subdomain(out)
    assert names.truncate_name(name) == out  # deterministic


@given(st.text(max_size=300))
def test_label_value_always_valid_and_deterministic(value: str) -> None:
    out = names.label_value(value)
    assert len(out) <= 63 and LABEL_VALUE.fullmatch(out)
    assert names.label_value(value) == out


@given(st.text(max_size=300), st.text(max_size=300))
def test_label_value_injective_in_practice(a: str, b: str) -> None:
    if a != b:
        assert names.label_value(a) != names.label_value(b)


@given(st.text(max_size=300))
def test_dns_label_name_is_a_service_name(value: str) -> None:
    out = names.dns_label_name(value)
    assert len(out) <= 63 and DNS_1035.fullmatch(out)


def test_stable_hash_separates_parts() -> None:
    assert names.stable_hash("ab", "c") != names.stable_hash("a", "bc")
    assert names.stable_hash("x") == names.stable_hash("x")


def test_model_labels_and_selector() -> None:
    model = ObjectRef("llm", "granite")
    labels = names.model_labels(model, "maas-subscription", "token-rate-limit-policy")
    assert labels == {
        "app.kubernetes.io/managed-by": "maas-controller",
        "app.kubernetes.io/part-of": "maas-subscription",
        "app.kubernetes.io/component": "token-rate-limit-policy",
        "maas.opendatahub.io/model": "granite",
        "maas.opendatahub.io/model-namespace": "llm",
    }
    assert names.model_selector(model).items() <= labels.items()
    assert names.gateway_labels(GatewayRef("gw-ns", "gw")) == {
        "maas.opendatahub.io/gateway-namespace": "gw-ns",
        "maas.opendatahub.io/gateway-name": "gw",
    }


@pytest.mark.parametrize(
    ("obj", "opted_out"),
    [
        pytest.param({"metadata": {"annotations": {"opendatahub.io/managed": "false"}}}, True, id="false"),
        pytest.param({"metadata": {"annotations": {"opendatahub.io/managed": " False "}}}, True, id="near-miss"),
        pytest.param({"metadata": {"annotations": {"opendatahub.io/managed": "true"}}}, False, id="true"),
        pytest.param({"metadata": {"annotations": {"opendatahub.io/managed": False}}}, False, id="not-a-string"),
        pytest.param({"metadata": {"annotations": None}}, False, id="null-annotations"),
        pytest.param({"metadata": {}}, False, id="no-annotations"),
        pytest.param({}, False, id="no-metadata"),
        pytest.param({"metadata": "junk"}, False, id="junk-metadata"),
    ],
)
def test_is_opted_out(obj: dict[str, object], opted_out: bool) -> None:
    assert names.is_opted_out(obj) is opted_out


@pytest.mark.parametrize(
    ("obj", "managed"),
    [
        pytest.param({"metadata": {"labels": {"app.kubernetes.io/managed-by": "maas-controller"}}}, True, id="ours"),
        pytest.param({"metadata": {"labels": {"app.kubernetes.io/managed-by": "kserve"}}}, False, id="foreign"),
        pytest.param({"metadata": {}}, False, id="unlabelled"),
    ],
)
def test_is_managed(obj: dict[str, object], managed: bool) -> None:
    assert names.is_managed(obj) is managed


@given(st.lists(st.text(max_size=5), max_size=3), st.lists(st.text(max_size=5), max_size=3))
def test_stable_hash_is_unambiguous(a: list[str], b: list[str]) -> None:
    if a != b:
        assert names.stable_hash(*a) != names.stable_hash(*b)
