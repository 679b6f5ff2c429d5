"""The organization-admin mapping: exact parse, merge of several ConfigMaps, closed by default."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.organizations import (
    ORG_ADMINS_KEY,
    OrganizationAdminsError,
    merge_config_maps,
    parse_document,
)


def cm(name: str, text: str | None, **meta: Any) -> dict[str, Any]:
    data = {ORG_ADMINS_KEY: text} if text is not None else {"other": "x"}
    return {"metadata": {"name": name, "namespace": "models-as-a-service", **meta}, "data": data}


def test_a_document_maps_organizations_to_groups_and_duplicates_merge() -> None:
    parsed = parse_document("""
- id: acme
  adminGroups: [acme-admins, acme-ops]
- id: Acme
  adminGroups: [other]
- id: acme
  adminGroups: [late]
""")
    assert parsed == {"acme": frozenset({"acme-admins", "acme-ops", "late"}), "Acme": frozenset({"other"})}
    assert parse_document("") == {}


@pytest.mark.parametrize("text", [
    pytest.param("acme: [acme-admins]", id="a-mapping-not-a-list"),
    pytest.param("- id: acme\n  groups: [a]", id="unknown-field"),
    pytest.param("- id: acme\n  adminGroups: [a]\n  extra: 1", id="extra-field"),
    pytest.param("- id: 123\n  adminGroups: [a]", id="numeric-id"),
    pytest.param("- id: yes\n  adminGroups: [a]", id="yaml-boolean-id"),
    pytest.param("- id: ''\n  adminGroups: [a]", id="empty-id"),
    pytest.param("- id: ' acme'\n  adminGroups: [a]", id="padded-id"),
    pytest.param("- id: \"ac\\\"me\"\n  adminGroups: [a]", id="quote-in-id"),
    pytest.param("- id: \"ac\\nme\"\n  adminGroups: [a]", id="newline-in-id"),
    pytest.param("- id: acme\n  adminGroups: []", id="no-groups"),
    pytest.param("- id: acme\n  adminGroups: ['']", id="empty-group"),
    pytest.param("- id: acme\n  adminGroups: [system:authenticated]", id="everyone"),
    pytest.param("- id: acme\n  adminGroups: ['*']", id="wildcard"),
    pytest.param("- id: acme\n  adminGroups: [system:unauthenticated]", id="anonymous"),
    pytest.param("- id: acme\n  adminGroups: [system:serviceaccounts]", id="all-serviceaccounts"),
    pytest.param("- id: acme\n  adminGroups: [[nested]]", id="nested-list"),
    pytest.param("- [unclosed", id="not-yaml"),
])
def test_anything_but_the_exact_format_is_refused(text: str) -> None:
    with pytest.raises(OrganizationAdminsError):
        parse_document(text)


def test_config_maps_merge_and_an_invalid_one_contributes_nothing() -> None:
    admins = merge_config_maps([
        cm("a", "- id: acme\n  adminGroups: [acme-admins]"),
        cm("b", "- id: acme\n  adminGroups: [acme-ops]\n- id: globex\n  adminGroups: [globex-admins]"),
        cm("bad", "- id: initech\n  adminGroups: [system:authenticated]"),
        cm("empty", None),
        cm("going", "- id: umbrella\n  adminGroups: [u]", deletionTimestamp="2026-01-01T00:00:00Z"),
    ])
    assert admins.by_organization == {"acme": frozenset({"acme-admins", "acme-ops"}),
                                      "globex": frozenset({"globex-admins"})}
    assert [r.split(":")[0] for r in admins.refused] == ["models-as-a-service/bad", "models-as-a-service/empty"]
    assert "system:authenticated" not in "".join(admins.refused)  # reasons never echo values
    assert admins.organizations_of(["acme-ops", "system:authenticated"]) == {"acme"}
    assert admins.organizations_of(["globex-admins", "acme-admins"]) == {"acme", "globex"}
    assert admins.organizations_of(["ACME-ADMINS", "acme-admins ", "initech", "u"]) == frozenset()
    assert merge_config_maps([]).organizations_of(["anything"]) == frozenset()


@given(st.lists(st.text(max_size=20), max_size=5))
def test_groups_nobody_mapped_administer_nothing(groups: list[str]) -> None:
    admins = merge_config_maps([cm("a", "- id: acme\n  adminGroups: [acme-admins]")])
    assert admins.organizations_of(groups) == ({"acme"} if "acme-admins" in groups else frozenset())
