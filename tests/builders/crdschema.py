"""Approximate validation of builder output against the real third-party CRDs in ../shared/crds (tests only).

Checks the structural OpenAPI schema (types, required, enums, patterns, lengths, items, unknown fields) and
evaluates each `x-kubernetes-validations` rule that the maasctl CEL environment can compile (rules using
Kubernetes-only functions or `oldSelf` are skipped). No substitute for the API server in integration tests,
but it catches misspelt fields and broken rules in milliseconds.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from maasctl.contract.cel import CelCompileError, CelEvaluationError, compile_expression
from maasctl.testenv.crds import shared_crds_dir

CRDS = shared_crds_dir() or Path(__file__).resolve().parents[3] / "shared" / "crds"
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,),
}


@cache
def schema_for(file: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / file).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return dict(v["schema"]["openAPIV3Schema"])
    raise KeyError(f"{file} has no version {version}")


def _check_rules(node: dict[str, Any], value: Any, path: str, errors: list[str]) -> None:
    for rule in node.get("x-kubernetes-validations", []):
        text = rule["rule"]
        if "oldSelf" in text:
            continue
        try:
            ok = compile_expression(text).evaluate({"self": value})
        except CelCompileError:
            continue
        except CelEvaluationError as exc:
            if "undeclared reference" in str(exc):  # Kubernetes-only function
                continue
            errors.append(f"{path}: rule {text!r} failed to evaluate: {exc}")
            continue
        if ok is not True:
            errors.append(f"{path}: {rule.get('message', text)}")


def validate(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    errors: list[str] = []
    kind = node.get("type")
    type_ok = kind is None or (
        isinstance(value, _TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
    )
    if not type_ok and not (value is None and node.get("nullable")):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: {value!r} not in {node['enum']}")
    if isinstance(value, str):
        if "pattern" in node and not re.search(node["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {node['pattern']}")
        if len(value) > node.get("maxLength", 10**9) or len(value) < node.get("minLength", 0):
            errors.append(f"{path}: length {len(value)} outside bounds")
    if (isinstance(value, int) and not isinstance(value, bool)
            and not node.get("minimum", -(2**63)) <= value <= node.get("maximum", 2**63)):
        errors.append(f"{path}: {value} outside bounds")
    if isinstance(value, list):
        if len(value) > node.get("maxItems", 10**9) or len(value) < node.get("minItems", 0):
            errors.append(f"{path}: {len(value)} items outside bounds")
        for i, item in enumerate(value):
            errors += validate(node.get("items", {}), item, f"{path}[{i}]")
    if isinstance(value, dict):
        props = node.get("properties", {})
        for req in node.get("required", []):
            if req not in value:
                errors.append(f"{path}: missing required {req!r}")
        extra = node.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                errors += validate(props[key], item, f"{path}.{key}")
            elif isinstance(extra, dict):
                errors += validate(extra, item, f"{path}.{key}")
            elif props and not node.get("x-kubernetes-preserve-unknown-fields") and path:
                errors.append(f"{path}: unknown field {key!r}")
    if not errors:
        _check_rules(node, value, path, errors)
    return errors


def validate_object(file: str, obj: dict[str, Any]) -> list[str]:
    version = obj["apiVersion"].rsplit("/", 1)[-1]
    schema = schema_for(file, version)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    return validate(schema, body, "")
