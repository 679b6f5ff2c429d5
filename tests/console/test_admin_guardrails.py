"""MaaS -> Guardrails in a real browser, checked against the objects on the real API server and the real
controller (which validates each configuration, with the real NeMo Guardrails engine when it is installed):
the settings, creating a configuration whose guard model key goes into a Secret (never into a page or a log),
the controller's and the API server's verdicts on the page, the list's attachments, per-model guardrails
chosen in the subscription form, and a non-administrator refused by the server."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path
from typing import Any

import httpx
from kubernetes_asyncio import client as k8s

from maasctl.console.guardrails import CONFIG_LABEL
from maasctl.tls import default_tls
from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld
from tests.console.test_admin_subscriptions import _get, row_index

GUARD_KEY = "guard-key-value-7f3a91"
CONFIG_YAML = """\
rails:
  input: {flows: [self check input]}
prompts:
  - task: self_check_input
    content: |
      Does the message below ask about a forbidden topic?
      Message: "{{ user_input }}"
      Answer Yes or No:
"""
# Passes the static checks; only the real engine finds the Colang error. Without the engine installed, a
# configuration the static checks refuse.
BAD_COLANG = ("rails:\n  input:\n    flows: [my check]\n", "define flow my check\n  this is not colang (((\n")
BAD_YAML = ("rails: [unclosed", "")


async def _admin(world: ConsoleWorld, browser: Browser) -> None:
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))


def _set(browser: Browser, field_id: str, text: str) -> None:
    """Set a textarea exactly (typing would be slow and re-indent nothing)."""
    browser.run("document.getElementById(arguments[0]).value = arguments[1]", field_id, text)


def fill_config(browser: Browser, config_id: str, models: list[tuple[str, str, str, str]], config_yaml: str,
                rails_co: str = "") -> None:
    browser.go("/admin/guardrails/new")
    browser.fill("config_id", config_id)
    for i, (kind, model, url, key) in enumerate(models):
        browser.fill(f"models-{i}-type", kind)
        browser.fill(f"models-{i}-model", model)
        browser.fill(f"models-{i}-base_url", url)
        if key:
            browser.fill(f"models-{i}-api_key", key)
    _set(browser, "config_yaml", config_yaml)
    _set(browser, "rails_co", rails_co)


async def _config(world: ConsoleWorld, name: str) -> dict[str, Any] | None:
    return await _get(world, "guardrailconfigs", name)


async def _checked(world: ConsoleWorld, name: str, timeout: float = 150.0) -> str:
    """The controller's phase for the configuration's current spec, once it has one (the engine's check of
    the last save has ended: it runs as a child process of the controller)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        obj = await _config(world, name) or {}
        status = obj.get("status") or {}
        if status.get("observedGeneration") == obj.get("metadata", {}).get("generation") \
                and status.get("phase") in ("Ready", "Invalid"):
            return str(status["phase"])
        assert loop.time() < deadline, f"the controller did not check {name}'s last save: {status}"
        await asyncio.sleep(0.3)


def _logs(world: ConsoleWorld) -> str:
    return "".join(p.read_text(errors="replace") for p in Path(world.stack.directory).rglob("*.log"))


async def test_settings_enable_fail_open_and_disable(world: ConsoleWorld, browser: Browser) -> None:
    sub_ns = world.stack.settings.subscription_namespace
    await objects.apply(world, [{"apiVersion": objects.MAAS, "kind": "GuardrailsSettings",
                                 "metadata": {"name": "default", "namespace": sub_ns},
                                 "spec": {"enabled": False, "failurePolicy": "FailClosed", "timeoutSeconds": 7}}])
    await _admin(world, browser)
    browser.go("/my/subscriptions")
    browser.click("header nav a[href='/admin/guardrails']")
    await browser.until(lambda: browser.path == "/admin/guardrails", what="guardrails page from the nav")
    assert "removes the data-plane integration" in browser.text("#guardrails-disabled")
    assert "have no effect" in browser.text("#guardrails-disabled")
    browser.button("Edit settings")
    await browser.until(lambda: browser.path == "/admin/guardrails/settings", what="settings form")
    try:
        assert browser.one("#policy-FailClosed").is_selected()
        browser.click("#enabled")
        browser.click("#policy-FailOpen")
        browser.screenshot("admin-guardrails-settings")
        browser.button("Save")
        await browser.until(lambda: browser.path == "/admin/guardrails", what="saved")
        assert "Saved the guardrails settings: guardrails are enabled (FailOpen" in browser.text()
        settings = await _get(world, "guardrailssettings", "default")
        assert settings is not None
        assert settings["spec"] == {"enabled": True, "failurePolicy": "FailOpen", "timeoutSeconds": 7}
        assert "enabled" in browser.text("#guardrails-settings") and "FailOpen" in browser.text("#guardrails-settings")
        assert not browser.all("#guardrails-disabled")
    finally:  # the switch is one per cluster: leave it off for the other tests
        browser.go("/admin/guardrails/settings")
        if browser.one("#enabled").is_selected():
            browser.click("#enabled")
        browser.click("#policy-FailClosed")
        browser.button("Save")
        await browser.until(lambda: browser.path == "/admin/guardrails", what="saved")
    settings = await _get(world, "guardrailssettings", "default")
    assert settings is not None
    assert settings["spec"] == {"enabled": False, "failurePolicy": "FailClosed", "timeoutSeconds": 7}
    assert "guardrails are disabled" in browser.text()
    assert "removes the data-plane integration" in browser.text("#guardrails-disabled")
    browser.screenshot("admin-guardrails-disabled")
    await _engine_removed(world)


async def _engine_removed(world: ConsoleWorld, timeout: float = 150.0) -> None:
    """Disabled: the controller deletes the engine's Deployment and the local runner stops the engine (it may
    still be starting from the moment it was enabled, so wait until it has been down for a few of its polls)."""
    apps = k8s.AppsV1Api(world.stack.api)
    loop = asyncio.get_running_loop()
    deadline, down_since = loop.time() + timeout, None
    while True:
        try:
            await apps.read_namespaced_deployment("maas-guardrails", world.stack.settings.subscription_namespace)
            present = True
        except k8s.ApiException as exc:
            assert exc.status == 404
            present = False
        running = world.stack.engine is not None and world.stack.engine.process is not None
        if present or running:
            down_since = None
        elif down_since is None:
            down_since = loop.time()
        elif loop.time() - down_since > 3:
            return
        assert loop.time() < deadline, "the guardrails engine was not removed after disabling"
        await asyncio.sleep(0.3)


async def test_create_a_config_with_an_api_key(world: ConsoleWorld, browser: Browser) -> None:
    sub_ns = world.stack.settings.subscription_namespace
    name = f"safety-{objects.suffix()}"
    url = f"{world.stack.model_url}/v1"
    await _admin(world, browser)
    browser.go("/admin/guardrails")
    browser.button("Create Config")
    await browser.until(lambda: browser.path == "/admin/guardrails/new", what="create form")

    # Each type at most once: refused on the page, everything typed kept except the key (never sent back).
    fill_config(browser, name, [("main", "gpt-x", url, GUARD_KEY), ("main", "gpt-y", url, "")], CONFIG_YAML)
    browser.button("Save")
    await browser.until(lambda: browser.all("#models-1-type-error"), what="duplicate type refused")
    assert "each model type at most once" in browser.text("#models-1-type-error")
    assert "enter it again" in browser.text("#models-0-api_key-error")
    assert browser.one("#models-0-model").get_attribute("value") == "gpt-x"
    assert browser.one("#models-1-base_url").get_attribute("value") == url
    assert browser.one("#config_yaml").get_attribute("value") == CONFIG_YAML
    assert GUARD_KEY not in browser.source()
    assert await _config(world, name) is None

    browser.fill("models-0-api_key", GUARD_KEY)
    browser.fill("models-1-type", "content_safety")
    browser.screenshot("admin-guardrails-create")
    browser.button("Save")
    await browser.until(lambda: browser.path == f"/admin/guardrails/configs/{name}", what="saved")
    obj = await _config(world, name)
    assert obj is not None
    secret_name = f"maas-guardrail-{name}-main"
    assert obj["spec"] == {
        "models": [{"type": "main", "engine": "openai", "model": "gpt-x", "baseUrl": url,
                    "apiKeySecretRef": {"name": secret_name, "key": "api-key"}},
                   {"type": "content_safety", "engine": "openai", "model": "gpt-y", "baseUrl": url}],
        "configYaml": CONFIG_YAML}
    secret = await k8s.CoreV1Api(world.stack.api).read_namespaced_secret(secret_name, sub_ns)
    assert base64.b64decode(secret.data["api-key"]).decode() == GUARD_KEY
    assert secret.metadata.labels[CONFIG_LABEL] == name
    assert [(o.kind, o.name, o.uid) for o in secret.metadata.owner_references] == [
        ("GuardrailConfig", name, obj["metadata"]["uid"])]

    # The controller's verdict on the page (the engine loads it), the key stored but never shown.
    def ready() -> bool:
        browser.go(f"/admin/guardrails/configs/{name}")
        return "Ready" in browser.text("#config-status")

    await browser.until(ready, timeout=150, what="configuration Ready")
    assert f"Stored in Secret {secret_name}" in browser.text("#config-form")
    assert GUARD_KEY not in browser.source()
    browser.go("/admin/guardrails")
    row = browser.one(f"#guardrail-configs tr[data-config='{name}']").text
    assert "main: gpt-x" in row and "API key stored" in row and "Ready" in row
    assert browser.text(f"#guardrail-configs tr[data-config='{name}'] td:last-child") == "No"
    assert GUARD_KEY not in browser.source()
    browser.screenshot("admin-guardrails-list")

    # Saving again without typing a key keeps it; a new key replaces the Secret's value.
    browser.go(f"/admin/guardrails/configs/{name}")
    browser.button("Save")
    await browser.until(lambda: "Saved guardrail configuration" in browser.text(), what="saved unchanged")
    assert (await _config(world, name) or {})["spec"] == obj["spec"]
    browser.fill("models-0-api_key", GUARD_KEY + "-2")
    browser.button("Save")
    await browser.until(lambda: "Saved guardrail configuration" in browser.text(), what="new key saved")
    secret = await k8s.CoreV1Api(world.stack.api).read_namespaced_secret(secret_name, sub_ns)
    assert base64.b64decode(secret.data["api-key"]).decode() == GUARD_KEY + "-2"
    assert GUARD_KEY not in browser.source()
    # A third model through "Add model" (a row added by the page's script).
    browser.go(f"/admin/guardrails/configs/{name}")
    browser.button("Add model")
    await browser.until(lambda: browser.all("#models-4-type"), what="added row")
    browser.fill("models-4-type", "judge")
    browser.fill("models-4-model", "gpt-z")
    browser.fill("models-4-base_url", url)
    browser.button("Save")
    await browser.until(lambda: "Saved guardrail configuration" in browser.text(), what="third model saved")
    models = (await _config(world, name) or {})["spec"]["models"]
    assert [m["type"] for m in models] == ["main", "content_safety", "judge"]
    assert models[0]["apiKeySecretRef"] == {"name": secret_name, "key": "api-key"}
    assert await _checked(world, name) == "Ready"  # checked again with its third model

    console_log = (Path(world.stack.directory) / "console.log").read_text()
    assert "console_guardrail_config_saved" in console_log and name in console_log
    logs = _logs(world)  # every process of the stack: controller, API server, engine, console
    assert GUARD_KEY not in logs and "guard-key-value" not in logs


async def test_validation_errors_are_shown_on_the_page(world: ConsoleWorld, browser: Browser) -> None:
    name = f"colang-{objects.suffix()}"
    url = f"{world.stack.model_url}/v1"
    await _admin(world, browser)
    engine = world.stack.engine is not None
    config_yaml, rails_co = BAD_COLANG if engine else BAD_YAML
    fill_config(browser, name, [("main", "gpt-x", url, "")], config_yaml, rails_co)
    browser.button("Save")
    await browser.until(lambda: browser.path == f"/admin/guardrails/configs/{name}", what="saved")

    def invalid() -> str:
        browser.go(f"/admin/guardrails/configs/{name}")
        found = browser.all("#config-problem")
        return str(found[0].text) if found else ""

    problem = await browser.until(invalid, timeout=150, what="the controller's verdict")
    assert "Invalid" in browser.text("#config-status")
    if engine:
        assert "the engine cannot load it" in problem and "colang" in problem.lower(), problem
    assert browser.one("#rails_co").get_attribute("value") == rails_co  # the editors still hold it to fix
    assert browser.one("#config_yaml").get_attribute("value") == config_yaml
    browser.screenshot("admin-guardrails-invalid")
    browser.go("/admin/guardrails")
    assert "Invalid" in browser.one(f"#guardrail-configs tr[data-config='{name}']").text

    # Fixed in the editor: Ready.
    browser.go(f"/admin/guardrails/configs/{name}")
    _set(browser, "config_yaml", CONFIG_YAML)
    _set(browser, "rails_co", "")
    browser.button("Save")
    await browser.until(lambda: "Saved guardrail configuration" in browser.text(), what="fixed")

    def ready() -> bool:
        browser.go(f"/admin/guardrails/configs/{name}")
        return "Ready" in browser.text("#config-status") and not browser.all("#config-problem")

    await browser.until(ready, timeout=150, what="fixed configuration Ready")

    # The API server's refusal (the ID is taken), next to the field; the rest kept.
    fill_config(browser, name, [("main", "gpt-x", url, "")], CONFIG_YAML)
    browser.button("Save")
    await browser.until(lambda: browser.all("#config_id-error"), what="AlreadyExists")
    assert "already exists" in browser.text("#config_id-error")
    assert browser.one("#config_yaml").get_attribute("value") == CONFIG_YAML
    # A base URL the API types refuse, on its field.
    fill_config(browser, f"{name}-x", [("main", "gpt-x", "ftp://nowhere", "")], CONFIG_YAML)
    browser.run("document.getElementById('models-0-base_url').type = 'text'")  # past the browser's own check
    browser.button("Save")
    await browser.until(lambda: browser.all("#models-0-base_url-error"), what="base URL refused")


async def test_per_model_guardrails_in_the_subscription_form_and_the_list(world: ConsoleWorld,
                                                                          browser: Browser) -> None:
    ns = await objects.namespace(world, "grsub")
    await objects.apply(world, objects.external_model(world, ns, "gpt-x")
                        + objects.external_model(world, ns, "gpt-y", target="gpt-y"))
    config, sub = f"strict-{objects.suffix()}", f"guarded-{objects.suffix()}"
    await _admin(world, browser)
    fill_config(browser, config, [("main", "gpt-x", f"{world.stack.model_url}/v1", "")], CONFIG_YAML)
    browser.button("Save")
    await browser.until(lambda: browser.path == f"/admin/guardrails/configs/{config}", what="config saved")
    assert await _checked(world, config) == "Ready"

    browser.go("/admin/subscriptions/new")
    assert browser.all("#guardrails-off")  # the switch is off: the form says a choice has no effect yet
    browser.fill("name", sub)
    browser.fill("users", "alice")
    x, y = row_index(browser, f"{ns}/gpt-x"), row_index(browser, f"{ns}/gpt-y")
    for i in (x, y):
        browser.click(f"#model-{i}-include")
        browser.fill(f"model-{i}-tiers", "1M per Hour")
    # A configuration that does not exist (a forged option) is refused next to the model.
    browser.run("const o = document.createElement('option'); o.value = 'no-such-config'; "
                "document.getElementById(arguments[0]).appendChild(o)", f"model-{x}-guardrails")
    browser.select(f"model-{x}-guardrails", "no-such-config")
    browser.button("Save")
    await browser.until(lambda: browser.all(f"#model-{x}-guardrails-error"), what="unknown config refused")
    browser.select(f"model-{x}-guardrails", config)
    assert browser.one(f"#model-{y}-guardrails").get_attribute("value") == ""
    browser.screenshot("admin-subscription-guardrails")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="subscription saved")

    obj = await _get(world, "maassubscriptions", sub)
    assert obj is not None
    refs = {m["name"]: m for m in obj["spec"]["modelRefs"]}
    assert refs["gpt-x"]["guardrails"] == {"enabled": True, "config": config}
    assert "guardrails" not in refs["gpt-y"]

    browser.go("/admin/guardrails")
    row = browser.one(f"#guardrail-configs tr[data-config='{config}']").text
    assert row.split("Yes:")[1].strip().startswith(f"{sub} → {ns}/gpt-x") and f"{ns}/gpt-y" not in row
    browser.go(f"/admin/guardrails/configs/{config}")
    assert f"{sub} → {ns}/gpt-x" in browser.text("#config-attached")
    browser.go(f"/admin/subscriptions/{sub}")
    assert f"{ns}/gpt-x: {config}" in browser.text("#subscription-settings")

    # Edited back to none: no guardrails on the model, the configuration no longer attached.
    browser.go(f"/admin/subscriptions/{sub}/edit")
    assert browser.one(f"#model-{x}-guardrails").get_attribute("value") == config
    browser.select(f"model-{x}-guardrails", "")
    browser.select(f"model-{y}-guardrails", config)
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="subscription saved")
    obj = await _get(world, "maassubscriptions", sub)
    assert obj is not None
    refs = {m["name"]: m for m in obj["spec"]["modelRefs"]}
    assert "guardrails" not in refs["gpt-x"] and refs["gpt-y"]["guardrails"] == {"enabled": True, "config": config}
    browser.go("/admin/guardrails")
    row = browser.one(f"#guardrail-configs tr[data-config='{config}']").text
    assert f"{ns}/gpt-y" in row and f"{ns}/gpt-x" not in row


def _signed_in(world: ConsoleWorld, user: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=world.url, verify=default_tls())
    page = client.get("/signin")
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    assert client.post("/signin", data={"token": world.token(user), "csrf_token": match.group(1)}).status_code == 303
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/keys").text)
    assert match
    return client, match.group(1)


async def test_only_administrators_write(world: ConsoleWorld, browser: Browser) -> None:
    before = await _get(world, "guardrailssettings", "default")
    name = f"nope-{objects.suffix()}"
    client, csrf = _signed_in(world, "alice")
    try:
        assert client.get("/admin/guardrails").status_code == 403
        refused = client.post("/admin/guardrails/settings",
                              data={"csrf_token": csrf, "enabled": "on", "failure_policy": "FailOpen"})
        assert refused.status_code == 403 and "Not allowed" in refused.text
        refused = client.post("/admin/guardrails/new", data={
            "csrf_token": csrf, "config_id": name, "models-0-type": "main", "models-0-model": "m",
            "models-0-base_url": "https://guard.example.com/v1", "models-0-api_key": GUARD_KEY,
            "config_yaml": CONFIG_YAML})
        assert refused.status_code == 403
    finally:
        client.close()
    after = await _get(world, "guardrailssettings", "default")
    assert (after or {}).get("spec") == (before or {}).get("spec")
    assert await _config(world, name) is None
    secrets = await k8s.CoreV1Api(world.stack.api).list_namespaced_secret(
        world.stack.settings.subscription_namespace, label_selector=f"{CONFIG_LABEL}={name}")
    assert secrets.items == []

    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: "alice" in browser.text("header"))
    assert not browser.all("header nav a[href='/admin/guardrails']")
    browser.go("/admin/guardrails")
    assert "Not allowed" in browser.text()

    # vic is in a console admin group without RBAC: the page opens, the API server refuses the write.
    browser.button("Sign out", "header")
    await browser.until(lambda: "alice" not in browser.text("body"), what="signed out")
    browser.sign_in_with_token(world.token("vic"))
    await browser.until(lambda: "vic" in browser.text("header"))
    fill_config(browser, name, [("main", "m", "https://guard.example.com/v1", GUARD_KEY)], CONFIG_YAML)
    browser.button("Save")
    await browser.until(lambda: browser.all("#_form-error") or browser.all(".error"), what="forbidden")
    assert "forbidden" in browser.text().lower()
    assert await _config(world, name) is None
