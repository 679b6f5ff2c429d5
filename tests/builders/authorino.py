"""A tiny test-only interpreter of the generated AuthPolicy, in Authorino's order, on the maasctl CEL env.

It evaluates exactly the fields the builder emits (`when` predicates, plain/TokenReview authentication, HTTP
metadata bodies, patternMatching predicates, success headers and the identity filter) with fake maas-api and
TokenReview callbacks, so the tests check what the policy *does*, not only what it looks like.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from maasctl.contract import identity as ids
from maasctl.contract.cel import compile_expression


@dataclass
class Outcome:
    status: int
    headers: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    denied_by: str = ""
    carried: ids.Carried | None = None
    """`x-maas-identity` as the payload processor reads it (kept out of `headers`)."""


def _when(entry: Mapping[str, Any], ctx: dict[str, Any]) -> bool:
    return all(compile_expression(w["predicate"]).evaluate_bool(ctx) for w in entry.get("when", []))


def _render(item: Mapping[str, Any], ctx: dict[str, Any]) -> Any:
    """A success header: `plain` is the value; `json` is its properties' values as JSON text (as Authorino)."""
    if "plain" in item:
        return compile_expression(item["plain"]["expression"]).evaluate(ctx)
    props = item["json"]["properties"]
    return json.dumps({k: compile_expression(v["expression"]).evaluate(ctx) for k, v in props.items()})


def _by_priority(rules: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(rules.items(), key=lambda kv: kv[1].get("priority", 0))


def run(
    policy: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    token_review: Callable[[str], dict[str, Any] | None],
    http: Callable[[str, Any], dict[str, Any]],
    path: str = "/llm/m/v1/chat/completions",
) -> Outcome:
    rules = policy["spec"]["rules"]
    request: dict[str, Any] = {"path": path, "method": "POST", "headers": {k.lower(): v for k, v in headers.items()}}
    ctx: dict[str, Any] = {"request": request, "auth": {"metadata": {}}}
    calls: list[tuple[str, Any]] = []

    identity: Any = None
    for _, rule in _by_priority(rules["authentication"]):
        if not _when(rule, ctx):
            continue
        if "plain" in rule:
            identity = compile_expression(rule["plain"]["expression"]).evaluate(ctx)
        elif "kubernetesTokenReview" in rule:
            auth = request["headers"].get("authorization", "")
            prefix = rule["credentials"]["authorizationHeader"]["prefix"] + " "
            identity = token_review(auth[len(prefix):]) if auth.startswith(prefix) else None
        if identity is not None:
            break
    if identity is None:
        return Outcome(401, calls=calls)
    ctx["auth"]["identity"] = identity

    for name, rule in _by_priority(rules["metadata"]):
        if not _when(rule, ctx):
            continue
        body = compile_expression(rule["http"]["body"]["expression"]).evaluate(ctx)
        if "cache" in rule:
            compile_expression(rule["cache"]["key"]["expression"]).evaluate(ctx)  # must evaluate too
        calls.append((rule["http"]["url"], body))
        ctx["auth"]["metadata"][name] = http(rule["http"]["url"], body)

    for name, rule in _by_priority(rules["authorization"]):
        if not _when(rule, ctx):
            continue
        for pattern in rule["patternMatching"]["patterns"]:
            if not compile_expression(pattern["predicate"]).evaluate_bool(ctx):
                return Outcome(403, calls=calls, denied_by=name)

    success = rules["response"]["success"]
    out_headers = {name: _render(item, ctx) for name, item in success["headers"].items() if _when(item, ctx)}
    props = success["filters"]["identity"]["json"]["properties"]
    exported = {k: compile_expression(v["expression"]).evaluate(ctx) for k, v in props.items()}
    carried = ids.decode_identity_header(out_headers.pop(ids.HEADER))
    return Outcome(200, out_headers, exported, calls, carried=carried)
