"""An administrator lands on the overview: what is published and in which phase, the subscriptions, today's
usage, and what is Failed or Degraded with its reason."""

from __future__ import annotations

from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld


async def test_an_administrator_lands_on_the_overview_and_sees_what_is_broken(world: ConsoleWorld,
                                                                             browser: Browser) -> None:
    ns = await objects.namespace(world, "ovw")
    broken = f"broken-{objects.suffix()}"
    await objects.apply(world, objects.external_model(world, ns, "fine"))
    sub_ns = world.stack.settings.subscription_namespace
    await objects.apply(world, [{  # names a model that does not exist: Failed, NotFound
        "apiVersion": objects.MAAS, "kind": "MaaSSubscription", "metadata": {"name": broken, "namespace": sub_ns},
        "spec": {"owner": {"users": ["bob"]},
                 "modelRefs": [{"name": "absent", "namespace": ns,
                                "tokenRateLimits": [{"limit": 5, "window": "1m"}]}]}}])
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: browser.path == "/admin/overview", what="an administrator lands on the overview")

    def problem() -> str:
        browser.go("/admin/overview")
        rows = browser.all(f"#overview-problems tr[data-object='MaaSSubscription/{sub_ns}/{broken}']")
        return rows[0].text if rows else ""

    await browser.until(lambda: "Failed" in problem(), what="the failed subscription listed")
    assert "absent" in problem() or "NotFound" in problem()  # with its reason
    assert "Ready" in browser.text("#overview-models") and int(
        browser.text("#overview-models .num").replace(",", "")) >= 1
    assert browser.text("#overview-tokens-today").replace(",", "").isdigit()
    assert not browser.all("#overview-problems tr[data-object^='MaaSModelRef/" + ns + "/fine']")
    browser.screenshot("admin-overview")

    developer = Browser(world.url)
    try:
        developer.sign_in_with_token(world.token("alice"))
        await developer.until(lambda: developer.path == "/my/subscriptions", what="a developer lands on theirs")
        developer.go("/admin/overview")
        assert "for MaaS administrators" in developer.text("main")  # the server refuses, not only the nav
    finally:
        developer.close()
