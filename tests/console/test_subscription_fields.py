"""The subscription form never loses a field it does not show, and sets the tenant and metering fields.

A MaaSSubscription setting every field of the CRD (per-model guardrails too, checked against the CRD's own
schema so a new field cannot be forgotten here) is saved unchanged through the form in Chromium: its spec and
metadata are the same afterwards, as is the console's auth policy. Editing one field changes only that field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from maasctl.api import MaaSSubscription
from maasctl.api.crdgen import crd_schema
from maasctl.console.subscriptions import MANAGED_LABEL
from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import SETTINGS, ConsoleWorld
from tests.console.test_admin_subscriptions import _get, row_index


def schema_leaves(node: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every leaf field path of an OpenAPI schema (lists of objects as `path[]`)."""
    if node.get("type") == "array" and (node.get("items") or {}).get("type") == "object":
        yield from schema_leaves(node["items"], prefix + "[]")
    elif node.get("type") == "object" and "properties" in node:
        for key, child in node["properties"].items():
            yield from schema_leaves(child, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def object_leaves(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return set().union(*(object_leaves(v, prefix + "[]") for v in value))
    if isinstance(value, dict) and value and not prefix.endswith("labels"):
        return set().union(*(object_leaves(v, f"{prefix}.{k}" if prefix else k) for k, v in value.items()))
    return {prefix}


def everything(world: ConsoleWorld, name: str, ns: str) -> dict[str, Any]:
    """A subscription setting every field of the CRD, as an operator would apply it."""
    return {"apiVersion": objects.MAAS, "kind": "MaaSSubscription",
            "metadata": {"name": name, "namespace": world.stack.settings.subscription_namespace,
                         "labels": {"team": "ml"},
                         "annotations": {"openshift.io/display-name": "Everything", "openshift.io/description": "All",
                                         "example.com/note": "kept"}},
            "spec": {
                "owner": {"users": ["alice", "bob"], "groups": [{"name": "premium-users"}]},
                "organization": {"id": "org-acme"},
                "modelRefs": [
                    {"name": "gpt-y", "namespace": ns, "unlimited": True, "billingRate": {"perToken": "0.000002"},
                     "guardrails": {"enabled": True, "config": "strict"}},
                    {"name": "gpt-x", "namespace": ns, "tokenRateLimits": [{"limit": 100_000_000, "window": "1h"},
                                                                           {"limit": 5_000, "window": "30s"}],
                     "guardrails": {"enabled": False}}],
                "tokenMetadata": {"organizationId": "legacy-acme", "costCenter": "cc-42",
                                  "labels": {"env": "prod", "tier": "gold"}},
                "priority": 7, "inferencePriority": 0,
                "gatewayRef": {"name": SETTINGS.gateway_name, "namespace": SETTINGS.gateway_namespace}}}


async def _setup(world: ConsoleWorld, browser: Browser, prefix: str) -> tuple[str, str]:
    ns = await objects.namespace(world, prefix)
    await objects.apply(world, objects.external_model(world, ns, "gpt-x")
                        + objects.external_model(world, ns, "gpt-y", target="gpt-y"))
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    return ns, f"{prefix}-{objects.suffix()}"


async def _save(browser: Browser) -> None:
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="saved")
    assert "Saved subscription" in browser.text(), browser.text()


def _kept(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"spec": obj["spec"], "labels": meta.get("labels"), "annotations": meta.get("annotations"),
            "finalizers": meta.get("finalizers")}


async def test_saving_unchanged_keeps_every_field_and_one_edit_changes_one_field(
        world: ConsoleWorld, browser: Browser) -> None:
    ns, name = await _setup(world, browser, "keep")
    sub = everything(world, name, ns)
    assert object_leaves(sub["spec"]) == set(schema_leaves(crd_schema(MaaSSubscription)["properties"]["spec"]))
    sub_ns = world.stack.settings.subscription_namespace
    policy = {"apiVersion": objects.MAAS, "kind": "MaaSAuthPolicy",
              "metadata": {"name": name, "namespace": sub_ns, "labels": {MANAGED_LABEL: name, "team": "ml"}},
              "spec": {"modelRefs": [{"name": "gpt-y", "namespace": ns}, {"name": "gpt-x", "namespace": ns}],
                       "subjects": {"users": ["alice", "bob"], "groups": [{"name": "premium-users"}]},
                       "meteringMetadata": {"organizationId": "org-acme", "costCenter": "cc-42",
                                            "labels": {"env": "prod"}}}}
    await objects.apply(world, [policy, sub])
    before = await _get(world, "maassubscriptions", name)
    policy_before = await _get(world, "maasauthpolicies", name)
    assert before is not None and policy_before is not None

    browser.go(f"/admin/subscriptions/{name}/edit")
    assert browser.one("#organization_id").get_attribute("readonly") is not None
    browser.screenshot("admin-subscription-form-all-fields")
    await _save(browser)
    after = await _get(world, "maassubscriptions", name)
    policy_after = await _get(world, "maasauthpolicies", name)
    assert after is not None and policy_after is not None
    assert _kept(after) == _kept(before)
    assert after["spec"] == sub["spec"]
    assert _kept(policy_after) == _kept(policy_before)

    # One field: the cost center. Everything else, guardrails included, is as it was.
    browser.go(f"/admin/subscriptions/{name}/edit")
    browser.fill("cost_center", "cc-43")
    await _save(browser)
    edited = await _get(world, "maassubscriptions", name)
    assert edited is not None
    expected = copy.deepcopy(after)
    expected["spec"]["tokenMetadata"]["costCenter"] = "cc-43"
    assert _kept(edited) == _kept(expected)

    # One model's price: only that entry's billingRate changes.
    browser.go(f"/admin/subscriptions/{name}/edit")
    browser.fill(f"model-{row_index(browser, f'{ns}/gpt-x')}-price", "0.5")
    await _save(browser)
    priced = await _get(world, "maassubscriptions", name)
    assert priced is not None
    expected["spec"]["modelRefs"][1]["billingRate"] = {"perToken": "0.5"}
    assert _kept(priced) == _kept(expected)
    assert _kept(await _get(world, "maasauthpolicies", name) or {"metadata": {}, "spec": None}) == _kept(
        policy_before)

    # Removing a subscriber that another field manager (the operator's apply) also owns removes it.
    browser.go(f"/admin/subscriptions/{name}/edit")
    browser.fill("users", "alice")
    await _save(browser)
    fewer = await _get(world, "maassubscriptions", name)
    policy_fewer = await _get(world, "maasauthpolicies", name)
    assert fewer is not None and policy_fewer is not None
    expected["spec"]["owner"]["users"] = ["alice"]
    assert _kept(fewer) == _kept(expected)
    assert policy_fewer["spec"]["subjects"]["users"] == ["alice"]
    assert policy_fewer["spec"]["meteringMetadata"] == policy["spec"]["meteringMetadata"]


async def test_tenant_and_metering_fields_from_the_form(world: ConsoleWorld, browser: Browser) -> None:
    ns, name = await _setup(world, browser, "tenant")
    browser.go("/admin/subscriptions/new")
    browser.fill("name", name)
    browser.fill("users", "alice")
    x, y = row_index(browser, f"{ns}/gpt-x"), row_index(browser, f"{ns}/gpt-y")
    browser.click(f"#model-{x}-include")
    browser.fill(f"model-{x}-tiers", "1M per Minute")
    browser.fill(f"model-{x}-price", "0.000002")
    browser.click(f"#model-{y}-include")
    browser.click(f"#model-{y}-unlimited")
    browser.fill("organization_id", "org-tenant")
    browser.fill("cost_center", "cc-7")
    browser.fill("labels", "env=dev\nteam=search")
    browser.fill("inference_priority", "-3")
    browser.fill("gateway_name", SETTINGS.gateway_name)  # without its namespace: refused next to the field
    browser.run("document.getElementById('organization_id').scrollIntoView()")
    browser.screenshot("admin-subscription-form-tenant")
    browser.button("Save")
    await browser.until(lambda: browser.all("#gateway-error"), what="gateway error")
    assert "namespace" in browser.text("#gateway-error")
    browser.fill("gateway_namespace", SETTINGS.gateway_namespace)
    browser.fill(f"model-{x}-price", "cheap")  # the API types' pattern, next to the model's price
    browser.button("Save")
    await browser.until(lambda: browser.all(f"#model-{x}-price-error"), what="price error")
    browser.fill(f"model-{x}-price", "0.000002")
    browser.fill("labels", "env=dev\nbad'key=1")  # only the API server's CEL rule checks label keys
    browser.button("Save")
    await browser.until(lambda: browser.all("#labels-error"), what="labels error")
    assert "labels keys" in browser.text("#labels-error")
    browser.fill("labels", "env=dev\nteam=search")
    await _save(browser)

    sub = await _get(world, "maassubscriptions", name)
    assert sub is not None
    spec = sub["spec"]
    assert spec["organization"] == {"id": "org-tenant"}
    assert spec["tokenMetadata"] == {"costCenter": "cc-7", "labels": {"env": "dev", "team": "search"}}
    assert spec["inferencePriority"] == -3
    assert spec["gatewayRef"] == {"name": SETTINGS.gateway_name, "namespace": SETTINGS.gateway_namespace}
    assert sorted(spec["modelRefs"], key=lambda m: m["name"]) == [
        {"name": "gpt-x", "namespace": ns, "tokenRateLimits": [{"limit": 1_000_000, "window": "1m"}],
         "billingRate": {"perToken": "0.000002"}},
        {"name": "gpt-y", "namespace": ns, "unlimited": True}]

    browser.go(f"/admin/subscriptions/{name}")
    settings = browser.text("#subscription-settings")
    assert "org-tenant" in settings and "cc-7" in settings and "team=search" in settings and "-3" in settings
    assert f"{SETTINGS.gateway_namespace}/{SETTINGS.gateway_name}" in settings

    # The organization ID is read-only once set; a changed one is refused by the API server, on the field.
    browser.go(f"/admin/subscriptions/{name}/edit")
    assert browser.one(f"#model-{y}-unlimited").is_selected()
    assert browser.one(f"#model-{x}-price").get_attribute("value") == "0.000002"
    browser.run("document.getElementById('organization_id').removeAttribute('readonly')")
    browser.fill("organization_id", "org-other")
    browser.fill("inference_priority", "")  # cleared: omitted again
    browser.button("Save")
    await browser.until(lambda: browser.all("#organization_id-error"), what="organization error")
    assert "immutable" in browser.text("#organization_id-error")
    browser.run("document.getElementById('organization_id').scrollIntoView()")
    browser.screenshot("admin-subscription-organization-error")
    browser.go(f"/admin/subscriptions/{name}/edit")
    browser.fill("inference_priority", "")
    await _save(browser)
    sub = await _get(world, "maassubscriptions", name)
    assert sub is not None and "inferencePriority" not in sub["spec"]
    assert sub["spec"]["organization"] == {"id": "org-tenant"}
