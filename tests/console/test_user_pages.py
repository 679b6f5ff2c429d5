"""A developer's pages in a real browser: My Subscriptions, API keys (mint, shown once, revoke) and the
models they can call, with the curl command taken from the page and run for real."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time

from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld

FOREIGN_ENDPOINT = "https://models.evil.example/v1;{touch,/tmp/x};true"


async def run_curl(command: str, key: str) -> dict[str, object]:
    """Run a command copied from the page with bash, the key in $MAAS_API_KEY (as a user would)."""
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "MAAS_API_KEY": key})
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    body: dict[str, object] = json.loads(out)
    return body


def mint_in_page(browser: Browser, name: str, subscription: str) -> None:
    browser.go("/keys")
    browser.fill("name", name)
    browser.select("subscription", subscription)
    browser.button("Create key")


async def test_the_models_page_offers_the_commands_the_selected_key_can_run(world: ConsoleWorld,
                                                                            browser: Browser) -> None:
    """A key is bound to one subscription: with several keys, the page asks which one, and for the chosen key lists
    only the models its subscription includes, each with a command; never a command the key cannot run."""
    ns = await objects.namespace(world, "keys")
    first, second = f"first-{objects.suffix()}", f"second-{objects.suffix()}"
    sub_ns = world.stack.settings.subscription_namespace
    await objects.apply(world, [*objects.external_model(world, ns, "model-a"),
                                *objects.external_model(world, ns, "model-b"),
                                *objects.access(world, first, ns, ["model-a"], ["alice"], [(100_000, "1m")]),
                                *objects.access(world, second, ns, ["model-b"], ["alice"], [(100_000, "1m")])])
    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: browser.path == "/my/subscriptions")
    await browser.until(lambda: (browser.go("/keys"), second in browser.text())[1], what="subscriptions listed")
    for key, sub in (("key-a", first), ("key-b", second)):
        mint_in_page(browser, key, f"{sub_ns}/{sub}")
        await browser.until(lambda: browser.path == "/keys/new", what="minted")

    browser.go("/models")  # several keys, none chosen: no command, the page says why
    assert "choose the key" in browser.text("#key-help")
    assert not browser.all("pre.curl")

    def listed(key: str, model: str) -> bool:
        browser.models_for_key(key)
        return bool(browser.all(f".model[data-model='{model}'] pre.curl"))

    await browser.until(lambda: listed("key-a", "model-a"), what="key-a's model with a command")
    assert not browser.all(".model[data-model='model-b']")  # key-a's subscription does not include it
    assert first in browser.text("#key-help")
    await browser.until(lambda: listed("key-b", "model-b"), what="key-b's model with a command")
    assert not browser.all(".model[data-model='model-a']")
    browser.screenshot("user-models-key")
    browser.go("/models?key=not-a-key-of-mine")  # an unknown id chooses nothing
    assert not browser.all("pre.curl")


async def test_developer_mints_a_key_calls_a_model_and_sees_usage(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "dev")
    sub = f"team-{objects.suffix()}"
    far = objects.external_model(world, ns, "gpt-far")  # its owner points status.endpoint elsewhere
    far[2]["spec"]["endpointOverride"] = FOREIGN_ENDPOINT
    await objects.apply(world, [*objects.external_model(world, ns, "gpt-x"), *far,
                                *objects.access(world, sub, ns, ["gpt-x", "gpt-far"], ["alice"],
                                                [(100_000_000, "1h"), (1_000_000_000, "24h")])])
    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: browser.path == "/my/subscriptions")

    # My Subscriptions shows the limits the way administrators write them.
    await browser.until(lambda: (browser.go("/my/subscriptions"), sub in browser.text())[1], what="subscription")
    text = browser.text()
    assert "100M tokens per Hour" in text and "1B tokens per Day" in text
    assert "last hour" in text and "last 24 hours" in text  # use against each window, not "this hour"

    # Mint a key: shown once, with a copy button.
    browser.go("/keys")
    browser.fill("name", "laptop")
    browser.select("subscription", f"{world.stack.settings.subscription_namespace}/{sub}")
    browser.button("Create key")
    await browser.until(lambda: browser.path == "/keys/new")
    key = browser.text("#new-key")
    assert key.startswith("sk-oai-")
    assert browser.one("button[data-copy='new-key']").text == "Copy"
    browser.screenshot("user-new-key")
    browser.go("/keys/new")  # never again
    assert browser.path == "/keys" and key not in browser.source()
    assert "laptop" in browser.text("#keys-table")
    browser.screenshot("user-keys")

    # The model is listed with a ready-to-paste curl for the chosen key; run it as the user would.
    await browser.until(lambda: (browser.models_for_key("laptop"), "gpt-x" in browser.text())[1], what="model listed")
    assert "laptop" in browser.text("#key-help") and sub in browser.text("#key-help")
    command = browser.one(".model[data-model='gpt-x'] pre.curl").text
    browser.screenshot("user-models")
    answer = await run_curl(command, key)
    assert answer.get("object") == "chat.completion", (command, answer)

    # A model advertised off the gateway: its URL and a note, no command that would send the key there.
    await browser.until(lambda: (browser.models_for_key("laptop"), "gpt-far" in browser.text())[1],
                        what="gpt-far listed")
    assert not browser.all(".model[data-model='gpt-far'] pre.curl")
    assert browser.one(".model[data-model='gpt-far'] code").text == FOREIGN_ENDPOINT
    assert "not on a MaaS gateway origin" in browser.text(".model[data-model='gpt-far'] .not-gateway")

    # The usage reaches maas-api and shows up in the chart of the subscription.
    def chart_has_usage() -> bool:
        browser.go(f"/my/subscriptions/{world.stack.settings.subscription_namespace}/{sub}?range=1d")
        cells = [c.text for c in browser.all("#usage-table td.num")]
        return any(c not in ("0", "") for c in cells)

    await browser.until(chart_has_usage, what="usage in the chart")
    heights = [float(r.get_attribute("height") or 0) for r in browser.all("svg.chart rect.bar")]
    assert any(h > 0 for h in heights)
    browser.screenshot("user-subscription-usage")

    # Revoke: the key stops working.
    browser.go("/keys")
    browser.one("#keys-table form button.danger").click()
    browser.driver.switch_to.alert.accept()
    await browser.until(lambda: "revoked" in browser.text("#keys-table"), what="key revoked")
    async def status_of_the_revoked_key() -> str:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command.replace("curl -s", "curl -s -o /dev/null -w '%{http_code}'"),
            stdout=subprocess.PIPE, env={**os.environ, "MAAS_API_KEY": key})
        out, _ = await proc.communicate()
        return out.decode()

    # A revoked key keeps working at most the AuthPolicy's cache TTL (1 s, as Authorino's caches: docs/security.md);
    # on a loaded machine the page can show "revoked" inside that second, so the refusal is awaited, bounded.
    deadline = time.monotonic() + 10
    status = await status_of_the_revoked_key()
    while status not in ("401", "403") and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        status = await status_of_the_revoked_key()
    assert status in ("401", "403")
