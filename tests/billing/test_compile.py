"""The Plan compiler: pure, deterministic, and every CEL text it emits compiles and means what it says."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.rules import identity
from maasctl.billing.rules.compile import (
    FAIL_CLOSED_RULE,
    FALLBACK_MARK,
    PlanInput,
    Tenant,
    compile_plan,
    glob_regex,
    model_predicate,
)
from maasctl.builders.celcheck import cel_texts, check_cel
from maasctl.builders.credentials import credential_authentication
from maasctl.contract.cel import compile_expression

from . import examples

TENANTS = (Tenant("ten-helix", "helix"), Tenant("ten-acme", "acme"))


def plan_input(mutate: Any = None, **kw: Any) -> PlanInput:
    obj = examples.example("plan", "billing")
    if mutate is not None:
        mutate(obj["spec"])
    spec = parse(Plan, obj).spec
    return PlanInput(namespace="billing", name="priority", uid="u-1", spec=spec, **{"tenants": TENANTS, **kw})


def by_kind(inp: PlanInput) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in compile_plan(inp).objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def test_the_seed_plan_compiles_to_three_policies_on_its_gateway() -> None:
    compiled = compile_plan(plan_input())
    kinds = [o["kind"] for o in compiled.objects]
    assert kinds == ["AuthPolicy", "RateLimitPolicy", "TokenRateLimitPolicy"]
    for obj in compiled.objects:
        assert obj["metadata"]["name"] == "billing-plan-priority" and obj["metadata"]["namespace"] == "billing"
        assert obj["spec"]["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "billing-demo-gateway"}
        assert obj["spec"]["overrides"]["strategy"] == "merge"
        assert obj["metadata"]["annotations"]["billing.opendatahub.io/queue-class"] == "priority"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
        check_cel(obj)
    rlp = compiled.objects[1]["spec"]["overrides"]["limits"]["billing/billing/priority/requests"]
    assert rlp["rates"] == [{"limit": 600, "window": "1m"}]
    assert rlp["counters"] == [{"expression": "auth.billing.tenant"}]
    trlp = compiled.objects[2]["spec"]["overrides"]["limits"]["billing/billing/priority/tokens"]
    assert trlp["rates"] == [{"limit": 2000000, "window": "1m"}, {"limit": 400000000, "window": "24h"}]
    assert compiled.unsupported and "maxConcurrency (64)" in compiled.unsupported[0]


def test_limits_apply_to_the_plans_tenants_only_and_count_per_tenant() -> None:
    limit = next(iter(by_kind(plan_input())["RateLimitPolicy"][0]["spec"]["overrides"]["limits"].values()))
    when = compile_expression(limit["when"][0]["predicate"])
    assert when.evaluate_bool({"auth": {"billing": {"tenant": "helix"}}})
    assert not when.evaluate_bool({"auth": {"billing": {"tenant": "other-org"}}})
    assert not when.evaluate_bool({"auth": {"identity": {"userid": "x"}}})  # no tenant: not this Plan's


def test_the_auth_policy_exports_the_tenant_and_admits_only_scoped_models_of_its_tenants() -> None:
    policy = by_kind(plan_input())["AuthPolicy"][0]
    rules = policy["spec"]["overrides"]["rules"]
    export = rules["response"]["success"]["filters"][identity.FILTER]
    assert export["json"]["properties"]["tenant"] == {"expression": identity.AUTHZ_TENANT}
    assert set(rules["authorization"]) == {FAIL_CLOSED_RULE, "billing-plan-billing-priority"}
    rule = rules["authorization"]["billing-plan-billing-priority"]
    applies = compile_expression(rule["when"][0]["predicate"])
    selected = {"subscriptionInfo": {"organizationId": "acme"}}
    assert applies.evaluate_bool({"auth": {"metadata": selected}})
    assert not applies.evaluate_bool({"auth": {"metadata": {}}})
    (pattern,) = rule["patternMatching"]["patterns"]
    allowed = compile_expression(pattern["predicate"])
    for path, ok in (("/llm/llama-3-70b/v1/chat/completions", True), ("/llm/granite-8b/v1/completions", True),
                     ("/llm/gpt-4o/v1/chat/completions", False), ("/llm", False), ("/llm/llama-30/v1", False)):
        assert allowed.evaluate_bool({"request": {"url_path": path}}) is ok, path


def test_the_plans_credential_entries_are_the_maas_ones_tried_last_and_marking_what_they_establish() -> None:
    """A Plan's policy alone on a route (no MaaS policy, the newest gateway policy) answers as the default-deny:
    its entries take the credentials the MaaS entries take, after every entry of a policy they are merged into,
    and whatever identity they establish is refused (`FAIL_CLOSED_RULE`); a MaaS identity never is."""
    rules = by_kind(plan_input())["AuthPolicy"][0]["spec"]["overrides"]["rules"]
    maas = credential_authentication()
    keys, tokens = rules["authentication"][f"{FAIL_CLOSED_RULE}-api-keys"], rules["authentication"][
        f"{FAIL_CLOSED_RULE}-tokens"]
    assert set(rules["authentication"]) == {f"{FAIL_CLOSED_RULE}-api-keys", f"{FAIL_CLOSED_RULE}-tokens"}
    assert keys["when"] == maas["api-keys"]["when"] and keys["priority"] == tokens["priority"] == 100
    assert {k: v for k, v in tokens.items() if k not in ("overrides", "priority")} == {
        k: v for k, v in maas["kubernetes-tokens"].items() if k != "priority"}
    assert tokens["overrides"] == {FALLBACK_MARK: {"value": True}}
    marked_key = compile_expression(keys["plain"]["expression"]).evaluate({})
    refuses = compile_expression(rules["authorization"][FAIL_CLOSED_RULE]["patternMatching"]["patterns"][0][
        "predicate"])
    review = {"authenticated": True, "user": {"username": "alice", "groups": ["g"]}}
    for identity_, admitted in ((marked_key, False), ({**review, FALLBACK_MARK: True}, False),
                                ("sk-oai-key", True), (review, True), ({"anonymous": True}, True)):
        assert refuses.evaluate_bool({"auth": {"identity": identity_, "metadata": {}}}) is admitted, identity_


def test_no_scopes_means_no_scope_rule_but_the_tenant_export_stays() -> None:
    def open_plan(spec: dict[str, Any]) -> None:
        del spec["modelScopes"]

    rules = by_kind(plan_input(open_plan))["AuthPolicy"][0]["spec"]["overrides"]["rules"]
    assert set(rules["authorization"]) == {FAIL_CLOSED_RULE}
    assert identity.FILTER in rules["response"]["success"]["filters"]


def test_geo_scopes_are_decided_from_the_targets_region() -> None:
    def eu(spec: dict[str, Any]) -> None:
        spec["geoScopes"] = ["eu-west", "eu-central"]

    inside = compile_plan(plan_input(eu, target_geo="eu-west"))
    outside = compile_plan(plan_input(eu, target_geo="us-east"))
    unknown = compile_plan(plan_input(eu))
    assert not inside.notes and "'us-east'" in outside.notes[0] and "no region" in unknown.notes[0]

    def geo_pattern(compiled: Any) -> bool:
        rule = compiled.objects[0]["spec"]["overrides"]["rules"]["authorization"]["billing-plan-billing-priority"]
        result: bool = compile_expression(rule["patternMatching"]["patterns"][1]["predicate"]).evaluate_bool({})
        return result

    assert geo_pattern(inside) and not geo_pattern(outside) and not geo_pattern(unknown)


def test_gpu_quota_gives_each_tenant_a_cluster_queue() -> None:
    def gpus(spec: dict[str, Any]) -> None:
        spec["limits"] = {"gpuQuota": 4}

    queues = by_kind(plan_input(gpus, gpu_flavor="h200"))["ClusterQueue"]
    assert [q["metadata"]["name"] for q in queues] == ["billing-billing-ten-acme", "billing-billing-ten-helix"]
    acme = queues[0]
    assert "namespace" not in acme["metadata"] and "ownerReferences" not in acme["metadata"]
    assert acme["spec"]["namespaceSelector"] == {"matchLabels": {"billing.opendatahub.io/tenant": "acme"}}
    assert acme["spec"]["resourceGroups"] == [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "h200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]
    assert acme["metadata"]["annotations"]["billing.opendatahub.io/queue-class"] == "priority"


def test_output_is_deterministic_and_the_hash_follows_the_intent() -> None:
    a, b = compile_plan(plan_input()), compile_plan(plan_input())
    assert a == b
    c = compile_plan(plan_input(lambda s: s["limits"].update(requestsPerMinute=601)))
    hashes = [o["metadata"]["annotations"]["billing.opendatahub.io/desired-hash"] for o in (a.objects[1],
                                                                                            c.objects[1])]
    assert hashes[0] != hashes[1]
    assert a.objects[0]["metadata"]["annotations"] == c.objects[0]["metadata"]["annotations"]


globs = st.from_regex(r"\A[a-z0-9*?][-a-z0-9.*?]{0,20}\Z")
names = st.from_regex(r"\A[a-z0-9][-a-z0-9.]{0,20}\Z")


@given(globs, names)
def test_glob_predicate_agrees_with_fnmatch_on_names(glob: str, name: str) -> None:
    import fnmatch
    import re

    expected = fnmatch.fnmatchcase(name, glob)
    assert (re.fullmatch(glob_regex(glob), name) is not None) == expected
    predicate = compile_expression(model_predicate([glob]))
    assert predicate.evaluate_bool({"request": {"url_path": f"/ns/{name}/v1/chat/completions"}}) == expected


@pytest.mark.parametrize(("glob", "other_namespace"), [("llm/granite-*", False), ("*/granite-8b", True)])
def test_globs_with_a_slash_match_namespace_and_name(glob: str, other_namespace: bool) -> None:
    predicate = compile_expression(model_predicate([glob]))
    assert predicate.evaluate_bool({"request": {"url_path": "/llm/granite-8b/v1/completions"}})
    assert predicate.evaluate_bool({"request": {"url_path": "/other/granite-8b/v1/completions"}}) is other_namespace
    assert not predicate.evaluate_bool({"request": {"url_path": "/llm/gpt-4o/v1/completions"}})


def test_every_cel_text_is_found_and_compiles() -> None:
    compiled = compile_plan(plan_input(lambda s: s.update(geoScopes=["eu-west"])))
    texts = [t for obj in compiled.objects for t in cel_texts(obj)]
    assert len(texts) >= 8
    for text in texts:
        compile_expression(text)
