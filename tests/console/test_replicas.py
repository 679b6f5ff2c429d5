"""Two console processes sharing their sessions in Redis, as the install runs two replicas behind one Service:
the world's console (A) and a second process (B) with the same session secret and Redis. One browser (its
cookie goes to both: cookies are per host, not per port) plays a load balancer sending a user's requests to
either replica."""

from __future__ import annotations

import asyncio

from maasctl.console.localrun import start_console
from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ADMIN_GROUPS, RBAC_GROUPS, ConsoleWorld, fixed_port


async def test_two_replicas_serve_one_session_and_a_restart_signs_nobody_out(world: ConsoleWorld,
                                                                            browser: Browser) -> None:
    b_url = await start_console(world.stack, fixed_port(), admin_groups=ADMIN_GROUPS, rbac_groups=RBAC_GROUPS,
                                redis_url=world.redis.url, name="console-b")
    replica_b = world.stack.processes["console-b"]
    ns, sub = await objects.namespace(world, "replicas"), f"replicas-{objects.suffix()}"
    await objects.apply(world, [*objects.external_model(world, ns, "gpt-x"),
                                *objects.access(world, sub, ns, ["gpt-x"], ["alice"], [(1000, "1m")])])
    try:
        # Sign in on A ...
        browser.sign_in_with_token(world.token("alice"))
        await browser.until(lambda: "alice" in browser.text("header"), what="signed in on A")
        cookie = browser.driver.get_cookie("maas_console_session")["value"]

        # ... continue on B: the same user, and a form of B (its CSRF token is the session's) is accepted.
        await browser.until(lambda: (browser.go(f"{b_url}/keys"), sub in browser.text("#subscription"))[1],
                            what="B serves alice's keys page with her subscription")
        assert "alice" in browser.text("header")
        browser.fill("name", "made-on-b")
        browser.select("subscription", f"{world.stack.settings.subscription_namespace}/{sub}")
        browser.button("Create key")
        await browser.until(lambda: browser.driver.current_url == f"{b_url}/keys/new", what="key minted on B")
        assert "made-on-b" in browser.text()
        browser.go("/keys")  # A lists it: one user, one session, two processes
        assert "made-on-b" in browser.text("#keys-table")
        browser.go("/keys/new")  # the key was shown once, on B: A does not show it again
        assert browser.path == "/keys" and "shown only once" in browser.text()

        # Sign out on B: A refuses the session too.
        browser.go(f"{b_url}/keys")
        browser.button("Sign out", scope="header")
        await browser.until(lambda: "/signin" in browser.driver.current_url, what="signed out on B")
        browser.driver.add_cookie({"name": "maas_console_session", "value": cookie, "path": "/"})  # replayed
        browser.go("/keys")
        assert browser.path.startswith("/signin"), "A still served the session B ended"

        # A restart signs nobody out: sign in on A, restart B, continue on B; then restart A.
        browser.sign_in_with_token(world.token("alice"))
        await browser.until(lambda: "alice" in browser.text("header"), what="signed in again on A")
        await asyncio.to_thread(replica_b.stop)
        replica_b.start()
        await world.stack._wait_http(f"{b_url}/readyz", "console-b")
        browser.go(f"{b_url}/my/subscriptions")
        assert browser.driver.current_url == f"{b_url}/my/subscriptions" and "alice" in browser.text("header")
        browser.screenshot("replica-b-after-restart")

        # Session ids are secrets: neither replica logged one (nor the cookie that carries it).
        current = browser.driver.get_cookie("maas_console_session")["value"]
        for name in ("console", "console-b"):
            log = world.stack.processes[name].log_path.read_text()
            for secret in (cookie.split(".")[0], current.split(".")[0], world.token("alice")):
                assert secret not in log, name
    finally:
        await asyncio.to_thread(replica_b.stop)
        world.stack.processes.pop("console-b", None)

