"""The issue's journey, end to end in real browsers against the real stack: an administrator imports an
external service and publishes two model names, creates a subscription with "100M per Hour, 1000M per Day"
for `*`; a user signs in, mints a key, calls a model with the curl from the page and sees the usage in the
chart; the administrator reads the report and exports the CSV."""

from __future__ import annotations

import csv
import io

from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld
from tests.console.test_admin_models import import_service
from tests.console.test_admin_subscriptions import fill_subscription, row_index
from tests.console.test_user_pages import run_curl


async def test_publish_subscribe_call_report_export(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "journey")
    sub = f"everyone-{objects.suffix()}"
    sub_id = f"{world.stack.settings.subscription_namespace}/{sub}"
    admin = browser

    # The administrator imports the provider and publishes two of its models, one under a name of its own.
    admin.sign_in_with_token(world.token("ops"))
    await admin.until(lambda: "ops" in admin.text("header"))
    import_service(admin, "provider", ns, f"{world.stack.model_url}/v1", world.stack.options.upstream_key)
    await admin.until(lambda: admin.path.endswith("/publish"), what="publish form")
    admin.fill("models-0-name", "gpt-x")
    admin.fill("models-1-name", "team-chat")
    admin.fill("models-1-target", "granite")
    admin.button("Save")
    await admin.until(lambda: admin.path == "/admin/models/services", what="published")

    # ... and sells them to every authenticated user.
    admin.go("/admin/subscriptions/new")
    await fill_subscription(admin, sub, f"{ns}/gpt-x", "100M per Hour, 1000M per Day", users="*")
    i = row_index(admin, f"{ns}/team-chat")
    admin.click(f"#model-{i}-include")
    admin.fill(f"model-{i}-tiers", "100M per Hour, 1000M per Day")
    admin.button("Save")
    await admin.until(lambda: admin.path == "/admin/subscriptions", what="subscription saved")

    # carol (no MaaS group at all) is a subscriber through `*`.
    user = Browser(world.url)
    try:
        user.sign_in_with_token(world.token("carol"))
        await user.until(lambda: user.path == "/my/subscriptions")
        await user.until(lambda: (user.go("/my/subscriptions"), sub in user.text())[1], what="subscription shown")
        assert "100M tokens per Hour" in user.text() and "1B tokens per Day" in user.text()
        user.go("/keys")
        user.fill("name", "journey")
        user.select("subscription", sub_id)
        user.button("Create key")
        await user.until(lambda: user.path == "/keys/new")
        key = user.text("#new-key")

        def listed() -> bool:
            user.models_for_key("journey")
            return len(user.all(".model pre.curl")) >= 2

        await user.until(listed, timeout=90, what="both models callable")
        user.screenshot("journey-user-models")
        for model in ("gpt-x", "team-chat"):  # the renamed one is called, and answers, by its published name
            command = user.one(f".model[data-model='{model}'] pre.curl").text
            answer = await run_curl(command, key)
            assert answer.get("object") == "chat.completion" and answer.get("model") == model, answer

        def charted() -> bool:
            user.go(f"/my/subscriptions/{sub_id}?range=1d")
            return any(c.text not in ("0", "") for c in user.all("#usage-table td.num"))

        await user.until(charted, what="usage in the user's chart")
        user.screenshot("journey-user-usage")
    finally:
        user.close()

    # The administrator sees carol's usage in the report and exports it.
    def reported() -> bool:
        admin.go(f"/admin/report?range=1d&subscription={sub_id}")
        return "carol" in admin.text("#report-table")

    await admin.until(reported, what="usage in the report")
    row = next(r for r in admin.all("#report-table tbody tr") if r.text.startswith("carol"))
    cells = [c.text for c in row.find_elements("css selector", "td")]
    assert cells[1] == sub_id and int(cells[2].replace(",", "")) > 0
    assert any(float(r.get_attribute("height") or 0) > 0 for r in admin.all("svg.chart rect.bar"))
    admin.screenshot("journey-admin-report")
    admin.click("#export-open")
    await admin.until(lambda: admin.one("#export-dialog").is_displayed(), what="export dialog")
    admin.one("#export-dialog input[value='model']").click()
    admin.screenshot("journey-admin-export-dialog")
    admin.click("#export-download")

    def downloaded() -> str:
        files = [p for p in admin.downloads.glob("*.csv")]
        return files[0].read_text() if files else ""

    text = await admin.until(downloaded, what="CSV downloaded")
    rows = list(csv.DictReader(io.StringIO(text)))
    by_model = {r["model"]: int(r["total_tokens"]) for r in rows}
    assert by_model.get(f"{ns}/gpt-x", 0) > 0 and by_model.get(f"{ns}/team-chat", 0) > 0, rows

    # The console's log names users and events, never a credential.
    log = (world.stack.directory / "console.log").read_text()
    assert "console_signin" in log and "carol" in log
    for secret in (key, world.token("carol"), world.token("ops"), world.stack.options.upstream_key):
        assert secret not in log
