"""Which policy a route is under: Kuadrant's effective policy for a path, for AuthPolicy, RateLimitPolicy and
TokenRateLimitPolicy objects (kuadrant-operator `api/v1/merge_strategies.go`, policy machinery).

The policies of a path are ordered from the least specific target to the most specific (the Gateway, then the
HTTPRoute), oldest first within one target. The most specific, newest one is the starting point; every other
policy, from right to left, is merged into it with *its own* strategy:

- `defaults` + `atomic` (also the implicit form): keep what is there, unless it is empty;
- `defaults` + `merge`: keep what is there and add the rules it lacks;
- `overrides` + `atomic`: replace what is there;
- `overrides` + `merge`: take its rules and keep the ones it does not have.

Rules are compared by name: `authentication#<name>`, `metadata#`, `authorization#`, `callbacks#`,
`response.success.headers#`, `response.success.metadata#` (filters), `response.unauthenticated#`,
`response.unauthorized#`, `patterns#<name>` and `conditions#` (the whole top-level `when`) for AuthPolicies;
`limits#<name>` and `conditions#` for the rate limit policies. The result is one synthetic object in the
implicit form, which the existing compilers read like any policy. With a single policy the object itself is
returned, so what worked before is untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maasctl.runtime.objects import thaw

__all__ = ["effective_policy", "order", "rules_of"]

Rules = dict[str, Any]
_AUTH_SECTIONS = ("authentication", "metadata", "authorization", "callbacks")


def _proper(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    for form in ("overrides", "defaults"):
        if spec.get(form):
            return spec[form]  # type: ignore[no-any-return]
    return spec


def _strategy(policy: Mapping[str, Any]) -> tuple[str, str]:
    """(defaults|overrides, atomic|merge)."""
    spec = policy.get("spec") or {}
    for form in ("overrides", "defaults"):
        if spec.get(form):
            return form, str(spec[form].get("strategy") or "atomic")
    return "defaults", "atomic"


def rules_of(policy: Mapping[str, Any]) -> Rules:
    """The named rules of a policy, keyed like Kuadrant's `Rules()`."""
    proper = _proper(policy.get("spec") or {})
    out: Rules = {}
    if proper.get("when"):
        out["conditions#"] = proper["when"]
    if policy.get("kind") != "AuthPolicy":
        for name, limit in (proper.get("limits") or {}).items():
            out[f"limits#{name}"] = limit
        return out
    for name, pattern in (proper.get("patterns") or {}).items():
        out[f"patterns#{name}"] = pattern
    rules = proper.get("rules") or {}
    for section in _AUTH_SECTIONS:
        for name, rule in (rules.get(section) or {}).items():
            out[f"{section}#{name}"] = rule
    response = rules.get("response") or {}
    for deny in ("unauthenticated", "unauthorized"):
        if response.get(deny):
            out[f"response.{deny}#"] = response[deny]
    success = response.get("success") or {}
    for name, item in (success.get("headers") or {}).items():
        out[f"response.success.headers#{name}"] = item
    for name, item in (success.get("filters") or {}).items():
        out[f"response.success.metadata#{name}"] = item
    return out


def _spec_from(kind: str, rules: Rules) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for key, value in rules.items():
        group, _, name = key.partition("#")
        if group == "conditions":
            spec["when"] = value
        elif group == "limits":
            spec.setdefault("limits", {})[name] = value
        elif group == "patterns":
            spec.setdefault("patterns", {})[name] = value
        elif group in _AUTH_SECTIONS:
            spec.setdefault("rules", {}).setdefault(group, {})[name] = value
        elif group in ("response.unauthenticated", "response.unauthorized"):
            spec.setdefault("rules", {}).setdefault("response", {})[group.split(".", 1)[1]] = value
        elif group == "response.success.headers":
            success = spec.setdefault("rules", {}).setdefault("response", {}).setdefault("success", {})
            success.setdefault("headers", {})[name] = value
        elif group == "response.success.metadata":
            success = spec.setdefault("rules", {}).setdefault("response", {}).setdefault("success", {})
            success.setdefault("filters", {})[name] = value
    return spec


def _empty(rules: Rules, kind: str) -> bool:
    """Kuadrant's `Empty()`: an AuthPolicy without auth rules, a rate limit policy without limits."""
    if kind == "AuthPolicy":
        return not any(not k.startswith(("conditions#", "patterns#")) for k in rules)
    return not any(k.startswith("limits#") for k in rules)


def _merge(source: Mapping[str, Any], target: Rules, kind: str) -> Rules:
    form, strategy = _strategy(source)
    theirs = rules_of(source)
    if strategy == "merge":
        if form == "defaults":
            return {**target, **{k: v for k, v in theirs.items() if k not in target}}
        return {**theirs, **{k: v for k, v in target.items() if k not in theirs}}
    if form == "overrides":
        return theirs
    return target if not _empty(target, kind) else theirs


def order(gateway_policies: Sequence[Mapping[str, Any]], route_policies: Sequence[Mapping[str, Any]]
          ) -> list[Mapping[str, Any]]:
    """The live policies of a path, least specific first, oldest first within a target (then by name)."""

    def key(o: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = o["metadata"]
        return str(meta.get("creationTimestamp", "")), str(meta.get("namespace", "")), str(meta["name"])

    def live(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return sorted((o for o in items if not o["metadata"].get("deletionTimestamp")), key=key)

    return [*live(gateway_policies), *live(route_policies)]


def effective_policy(gateway_policies: Sequence[Mapping[str, Any]], route_policies: Sequence[Mapping[str, Any]]
                     ) -> Mapping[str, Any] | None:
    """The effective policy of a route under `gateway_policies` (targeting its Gateway) and `route_policies`
    (targeting the HTTPRoute), or None when there is none."""
    path = order(gateway_policies, route_policies)
    if not path:
        return None
    if len(path) == 1:
        return path[0]
    last = path[-1]
    kind = str(last["kind"])
    rules = rules_of(last)
    for policy in reversed(path[:-1]):
        rules = _merge(policy, rules, kind)
    metas = [p["metadata"] for p in path]
    return {
        "apiVersion": last["apiVersion"],
        "kind": kind,
        "metadata": {
            "name": "+".join(str(m["name"]) for m in metas),
            "namespace": str(last["metadata"].get("namespace", "")),
            "uid": "+".join(f"{m.get('uid', '')}@{m.get('generation', 0)}" for m in metas),
            "generation": 0,
        },
        "spec": thaw(_spec_from(kind, rules)),  # cached objects are frozen: a plain copy of their parts
    }
