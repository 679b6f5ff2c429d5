"""OIDC sign-in against a real OpenID provider (npm oidc-provider on Node, HTTPS): authorization code with
PKCE; the API server trusts the provider, so the ID token is the user's credential for RBAC and maas-api."""

from __future__ import annotations

import re
import time

import httpx
from kubernetes_asyncio import client as k8s

from maasctl.tls import default_tls
from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import SHORT_ID_TOKEN_SECONDS, ConsoleWorld


async def oidc_sign_in(browser: Browser, login: str) -> None:
    browser.go("/signin")
    browser.click("#oidc-signin")
    await browser.until(lambda: browser.driver.current_url.startswith(browser.base_url) is False
                        and browser.all("input[name=login]"), what="the provider's login form")
    browser.screenshot("oidc-provider-login")
    browser.one("input[name=login]").send_keys(login)
    browser.one("input[name=password]").send_keys("any password")
    browser.one("button[type=submit]").click()

    def back_or_consent() -> bool:
        if browser.driver.current_url.startswith(browser.base_url):
            return True
        buttons = browser.all("button[type=submit]")
        if buttons and "Continue" in buttons[0].text:
            buttons[0].click()
        return False

    await browser.until(back_or_consent, what="back at the console")


async def test_oidc_admin_signs_in_and_acts_with_their_own_rights(world: ConsoleWorld, browser: Browser) -> None:
    await oidc_sign_in(browser, "dave")
    await browser.until(lambda: "oidc:dave" in browser.text("header"), what="signed in as oidc:dave")
    assert "ADMINISTRATOR" in browser.text("header nav").upper()  # groups claim -> oidc:maas-admins
    cookie = {c["name"]: c for c in browser.driver.get_cookies()}["maas_console_session"]
    assert cookie["httpOnly"] and browser.run("return document.cookie") == ""
    browser.screenshot("oidc-signed-in")

    # The ID token works on the Kubernetes API (RBAC for oidc:maas-admins) ...
    ns = await objects.namespace(world, "oidc")
    browser.go("/admin/models/services/new")
    browser.fill("name", "via-oidc")
    browser.fill("namespace", ns)
    browser.fill("endpoint", "https://api.example.com/v1")
    browser.button("Create")
    await browser.until(lambda: browser.path.endswith("/publish"), what="service imported as oidc:dave")
    secret = await k8s.CoreV1Api(world.stack.api).read_namespaced_secret("maas-service-via-oidc", ns)
    assert secret.metadata.managed_fields[0].manager == "maas-console"

    # ... and on maas-api (TokenReview of the same token): a key minted for oidc:dave.
    sub = f"oidc-{objects.suffix()}"
    await objects.apply(world, [*objects.external_model(world, ns, "gpt-x"),
                                *objects.access(world, sub, ns, ["gpt-x"], ["oidc:dave"], [(1000, "1m")])])
    await browser.until(lambda: (browser.go("/keys"), sub in browser.text("#subscription"))[1], what="sub listed")
    browser.fill("name", "sso-key")
    browser.select("subscription", f"{world.stack.settings.subscription_namespace}/{sub}")
    browser.button("Create key")
    await browser.until(lambda: browser.path == "/keys/new", what="key minted")
    browser.go("/keys")
    assert "sso-key" in browser.text("#keys-table")


async def test_oidc_user_without_admin_group_is_a_developer(world: ConsoleWorld, browser: Browser) -> None:
    await oidc_sign_in(browser, "erin")
    await browser.until(lambda: "oidc:erin" in browser.text("header"), what="signed in as oidc:erin")
    browser.go("/admin/subscriptions")
    assert "Not allowed" in browser.text()


def test_a_forged_or_replayed_callback_is_refused(world: ConsoleWorld) -> None:
    with httpx.Client(base_url=world.url, verify=default_tls()) as client:
        # No sign-in was started in this session.
        resp = client.get("/signin/oidc/callback", params={"code": "x", "state": "y"})
        assert resp.status_code == 400
        # Started, but the state does not match (a response meant for someone else).
        start = client.get("/signin/oidc")
        assert start.status_code == 303
        location = start.headers["location"]
        assert location.startswith(world.oidc.issuer)
        assert "code_challenge_method=S256" in location and re.search(r"[?&]nonce=", location)
        resp = client.get("/signin/oidc/callback", params={"code": "x", "state": "not-the-state"})
        assert resp.status_code == 400
        assert "does not match" in resp.text
        # The pending request is used up: a second try with the right state fails too.
        state = re.search(r"[?&]state=([^&]+)", location)
        assert state
        resp = client.get("/signin/oidc/callback", params={"code": "x", "state": state.group(1)})
        assert resp.status_code == 400
        assert client.get("/keys").status_code == 303  # still signed out


async def test_an_oidc_session_outlives_its_id_token_and_a_refused_refresh_ends_it(world: ConsoleWorld,
                                                                                   browser: Browser) -> None:
    """gail's and hank's ID tokens live 10 seconds. gail's session goes on past that: the console renewed her
    credential with the refresh token (the API server and maas-api accept the new one; the old one has expired).
    hank's refresh token has expired too: the provider refuses it and his session ends on the sign-in page."""
    log = world.stack.processes["console"].log_path
    hank = Browser(world.url, trust_spki=world.oidc.spki)
    try:
        await oidc_sign_in(browser, "gail")
        await browser.until(lambda: "oidc:gail" in browser.text("header"), what="signed in as oidc:gail")
        gail_expired = time.time() + SHORT_ID_TOKEN_SECONDS + 1  # her first ID token is dead after this
        await oidc_sign_in(hank, "hank")
        await hank.until(lambda: "oidc:hank" in hank.text("header"), what="signed in as oidc:hank")

        def renewed(user: str) -> bool:
            return any('"console_session_refreshed"' in line and f'"{user}"' in line
                       for line in log.read_text().splitlines())

        # Pages as usual, until the console has renewed her ID token and the first one has expired.
        await browser.until(
            lambda: (browser.go("/admin/models"), renewed("oidc:gail") and time.time() > gail_expired)[1],
            what="gail's ID token renewed and the first one expired")
        browser.go("/admin/models")  # the API server, with the renewed credential
        assert browser.path == "/admin/models" and "oidc:gail" in browser.text("header")
        assert not browser.all("main .error") and browser.all("#published-models")
        browser.go("/keys")  # maas-api, with it
        assert browser.path == "/keys" and not browser.all("main .error")

        # hank: the refresh is refused, the session ends cleanly (the sign-in page says why; no error page).
        await hank.until(lambda: (hank.go("/keys"), hank.path.startswith("/signin"))[1], what="hank's session ended")
        assert "Sign in again" in hank.text() and "ended" in hank.text()
        hank.screenshot("signin-session-ended")
        hank.go("/keys")
        assert hank.path.startswith("/signin")  # the session is gone, not only this page
        assert not renewed("oidc:hank")
        assert '"console_session_refresh_refused"' in log.read_text()
    finally:
        hank.close()
