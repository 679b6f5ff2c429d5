"""Unit tests of the CRD generator: checked-in YAML is current, schemas are structural and complete."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel
from pydantic_core import PydanticCustomError

from maasctl import manifests
from maasctl.api import admission, crdgen
from maasctl.api._fields import ENDPOINT_PATTERN, WINDOW_PATTERN, Matches, safe

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
CRDS = {doc["spec"]["names"]["kind"]: doc for doc in map(crdgen.crd, crdgen.KINDS)}
"""Our maas.opendatahub.io kinds (the reference's inference.opendatahub.io ones: tests/api/test_inference_crds.py)."""


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with a dotted path."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_checked_in_manifests_match_the_generator() -> None:
    assert manifests.stale_files(MANIFESTS) == [], "run: python hack/gen_crds.py"


def test_stale_files_detects_a_hand_edit(tmp_path: Path) -> None:
    manifests.write_all(tmp_path)
    assert manifests.stale_files(tmp_path) == []
    target = tmp_path / "crds" / "maas.opendatahub.io_maassubscriptions.yaml"
    target.write_text(target.read_text().replace("maxItems: 128", "maxItems: 129", 1))
    assert manifests.stale_files(tmp_path) == ["crds/maas.opendatahub.io_maassubscriptions.yaml"]
    assert manifests.write_all(tmp_path) == [target]


def test_hack_script_check_mode_passes_on_the_checked_in_tree() -> None:
    done = subprocess.run([sys.executable, str(REPO / "hack" / "gen_crds.py"), "--check"], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_render_all_yaml_parses_back_to_the_objects() -> None:
    files = manifests.render_all()
    for doc in CRDS.values():
        assert yaml.safe_load(files[f"crds/maas.opendatahub.io_{doc['spec']['names']['plural']}.yaml"]) == doc
    assert list(yaml.safe_load_all(files["admission/maas-subscription-namespace.yaml"])) == admission.manifests()
    assert "&id" not in "".join(files.values()), "YAML anchors make the manifests hard to read"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_kind_presentation(kind: str) -> None:
    spec = CRDS[kind]["spec"]
    version = spec["versions"][0]
    assert spec["group"] == "maas.opendatahub.io" and version["name"] == "v1alpha1"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["categories"] == ["maas"]
    assert spec["names"]["shortNames"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert "Phase" in columns and columns["Age"]["type"] == "date"


def test_short_names_are_unique() -> None:
    names = [n for doc in CRDS.values() for n in doc["spec"]["names"]["shortNames"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    for path, node in nodes(schema_of(kind)):
        assert "type" in node, path
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title", "$defs"} & node.keys(), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "object" and path:
            assert "properties" in node or "additionalProperties" in node or path == ".metadata", path


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_field_is_described(kind: str) -> None:
    undocumented = [
        path
        for path, node in nodes(schema_of(kind))
        if path != ".metadata" and not path.endswith("[]") and not path.endswith("{}") and not node.get("description")
    ]
    assert undocumented == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_sizes_are_bounded_so_cel_rules_fit_the_cost_budget(kind: str) -> None:
    for path, node in nodes(schema_of(kind)):
        if node["type"] == "array":
            assert "maxItems" in node, path
        if node["type"] == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        top_level = path in (".apiVersion", ".kind")
        if node["type"] == "string" and node.get("format") != "date-time" and "enum" not in node and not top_level:
            assert "maxLength" in node, path


def test_subscription_rules() -> None:
    spec = schema_of("MaaSSubscription")["properties"]["spec"]
    props = spec["properties"]
    assert props["priority"]["default"] == 0 and props["priority"]["format"] == "int32"
    assert "default" not in props["inferencePriority"] and props["inferencePriority"]["format"] == "int32"
    assert props["inferencePriority"]["minimum"] == -(2**31)
    assert "inferencePriority" not in spec["required"]
    org = props["organization"]
    assert org["properties"]["id"]["minLength"] == 1
    assert [r["rule"] for r in org["x-kubernetes-validations"]] == ["self.id == oldSelf.id"]
    assert any("oldSelf.organization" in r["rule"] for r in spec["x-kubernetes-validations"])
    ref = props["modelRefs"]["items"]
    assert any("unlimited" in r["rule"] and "tokenRateLimits" in r["rule"] for r in ref["x-kubernetes-validations"])
    limit = ref["properties"]["tokenRateLimits"]["items"]["properties"]["limit"]
    assert limit["minimum"] == 1 and limit["maximum"] > 1
    window = ref["properties"]["tokenRateLimits"]["items"]["properties"]["window"]
    assert "use hours instead" in window["x-kubernetes-validations"][0]["message"]


def test_every_rule_message_names_its_field() -> None:
    for kind in CRDS:
        for path, node in nodes(schema_of(kind)):
            for rule in node.get("x-kubernetes-validations", []):
                # the rule's own field (list items: the list), or for object rules one of its properties
                names = {path.rstrip("[]{}").rsplit(".", 1)[-1], *node.get("properties", {})}
                assert any(n.lower() in rule["message"].lower() for n in names), (path, rule["message"])


def test_admission_policy_namespace_is_set_at_render_time() -> None:
    policy, binding = admission.manifests()
    assert "'models-as-a-service'" in policy["spec"]["variables"][0]["expression"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [
        "maassubscriptions",
        "maasauthpolicies",
        "guardrailssettings",
        "guardrailconfigs",
    ]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    other, _ = admission.manifests("tenant-a")
    assert "'tenant-a'" in other["spec"]["variables"][0]["expression"]
    assert "tenant-a" in manifests.render_all("tenant-a")["admission/maas-subscription-namespace.yaml"]


@pytest.mark.parametrize("bad", ["Bad", "a'b", "x" * 64, "-a", "a.b"])
def test_admission_namespace_must_be_a_namespace_name(bad: str) -> None:
    with pytest.raises(ValueError, match="not a valid namespace name"):
        admission.manifests(bad)


CORPUS = [
    "1m", "24h", "9999s", "1d", "0m", "10000s", "1.5h", "90", "", "\u0661m",
    "ok", 'a"b', "a'b", "a\\b", "a\nb", "a\x00b", "a\x85b", "ünïcode", "*",
    "https://host/v1", "http://1.2.3.4:80", "https://host/v1?x", "ftp://h", "https://h/a b",
]  # fmt: skip


@pytest.mark.parametrize(
    "matcher",
    [Matches(WINDOW_PATTERN, "w"), safe("x"), Matches(ENDPOINT_PATTERN, "e")],
    ids=["window", "safe", "endpoint"],
)
def test_python_and_cel_agree_on_every_regex_rule(matcher: Matches) -> None:
    env = celpy.Environment()
    program = env.program(env.compile(matcher.rule().rule))
    for value in CORPUS:
        try:
            matcher._check(value)
            python_ok = True
        except PydanticCustomError:
            python_ok = False
        assert bool(program.evaluate({"self": json_to_cel(value)})) == python_ok, value


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_numeric_bounds_are_exact_in_float64(kind: str) -> None:
    # The API server parses schema bounds as float64 and rejects e.g. maximum 2**63 - 1 for an int64 field.
    for path, node in nodes(schema_of(kind)):
        for key in ("minimum", "maximum"):
            assert abs(node.get(key, 0)) <= 2**53, (path, key)
