"""Sign-in with a Kubernetes token, sessions and the attacks a console must refuse (real console process,
real API server, real Chromium)."""

from __future__ import annotations

import re

import httpx

from maasctl.tls import default_tls
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld


async def test_token_sign_in_starts_an_httponly_session_and_shows_the_user(world: ConsoleWorld,
                                                                         browser: Browser) -> None:
    browser.go("/my/subscriptions")
    assert browser.path.startswith("/signin?next=")  # not signed in: sent to the sign-in page
    anonymous = {c["name"]: c["value"] for c in browser.driver.get_cookies()}
    browser.fill("token", world.token("alice"))
    browser.button("Sign in with token")
    await browser.until(lambda: browser.path == "/my/subscriptions", what="back on the page asked for")
    assert "alice" in browser.text("header")
    browser.screenshot("signin-my-subscriptions-empty")
    cookies = {c["name"]: c for c in browser.driver.get_cookies()}
    session = cookies["maas_console_session"]
    assert session["httpOnly"] is True and session["sameSite"] == "Lax"
    assert session["value"] != anonymous["maas_console_session"]  # a new session id at sign-in
    assert browser.run("return document.cookie") == ""  # nothing readable by scripts
    assert world.token("alice") not in browser.source()


async def test_sign_in_with_the_keyboard_only(world: ConsoleWorld, browser: Browser) -> None:
    from selenium.webdriver.common.keys import Keys

    browser.go("/signin")
    body = browser.one("body")
    body.send_keys(Keys.TAB)  # the skip link comes first
    assert browser.run("return document.activeElement.textContent") == "Skip to content"
    active = browser.driver.switch_to.active_element
    active.send_keys(Keys.TAB)
    assert browser.run("return document.activeElement.id") == "token"
    assert browser.run("return document.querySelector('label[for=token]').textContent") == "Bearer token"
    browser.driver.switch_to.active_element.send_keys(world.token("bob"), Keys.ENTER)
    await browser.until(lambda: "bob" in browser.text("header"), what="signed in by keyboard")


async def test_a_wrong_token_is_refused(world: ConsoleWorld, browser: Browser) -> None:
    browser.go("/signin")
    browser.fill("token", "not-a-token")
    browser.button("Sign in with token")
    await browser.until(lambda: "did not accept" in browser.text(), what="refusal shown")
    browser.go("/keys")
    assert browser.path.startswith("/signin")


async def test_admin_pages_only_for_admin_groups(world: ConsoleWorld, browser: Browser) -> None:
    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: "alice" in browser.text("header"))
    assert "ADMINISTRATOR" not in browser.text("header nav").upper()  # no admin navigation
    browser.go("/admin/models")
    assert "Not allowed" in browser.text()


def _cookie_and_csrf(client: httpx.Client) -> str:
    page = client.get("/signin")
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    return match.group(1)


def test_forms_need_the_session_csrf_token(world: ConsoleWorld) -> None:
    with httpx.Client(base_url=world.url, verify=default_tls()) as client:
        csrf = _cookie_and_csrf(client)
        no_token = client.post("/signin", data={"token": world.token("alice")})
        assert no_token.status_code == 403
        wrong = client.post("/signin", data={"token": world.token("alice"), "csrf_token": csrf + "x"})
        assert wrong.status_code == 403
        as_json = client.post("/signin", json={"token": world.token("alice"), "csrf_token": csrf})
        assert as_json.status_code == 415
        ok = client.post("/signin", data={"token": world.token("alice"), "csrf_token": csrf})
        assert ok.status_code == 303
        # A signed-in session's token is a new one: the anonymous form token does not work any more.
        assert client.get("/my/subscriptions").status_code == 200
        stale = client.post("/signout", data={"csrf_token": csrf})
        assert stale.status_code == 403


def test_session_fixation_and_forged_cookies_are_refused(world: ConsoleWorld) -> None:
    with httpx.Client(base_url=world.url, verify=default_tls()) as attacker:
        csrf = _cookie_and_csrf(attacker)
        planted = attacker.cookies["maas_console_session"]
    # The victim signs in with a session id the attacker planted: the console issues a new one.
    with httpx.Client(base_url=world.url, verify=default_tls()) as victim:
        resp = victim.post("/signin", data={"token": world.token("alice"), "csrf_token": csrf},
                           headers={"Cookie": f"maas_console_session={planted}"})
        issued = resp.cookies["maas_console_session"]
        assert resp.status_code == 303 and issued != planted
        assert victim.get("/keys", headers={"Cookie": f"maas_console_session={issued}"}).status_code == 200
    with httpx.Client(base_url=world.url, cookies={"maas_console_session": planted}, verify=default_tls()) as attacker:
        assert attacker.get("/keys").status_code == 303  # the planted id is not signed in
    sid = planted.split(".")[0]
    for forged in (sid, f"{sid}.AAAA", "x.y.z", ""):
        with httpx.Client(base_url=world.url, cookies={"maas_console_session": forged}, verify=default_tls()) as client:
            assert client.get("/keys").status_code == 303


def test_odd_paths_and_redirects_stay_inside_the_console(world: ConsoleWorld) -> None:
    with httpx.Client(base_url=world.url, verify=default_tls()) as client:
        csrf = _cookie_and_csrf(client)
        for target in ("//evil.example/x", "https://evil.example", "/\\evil.example", "\\\\evil"):
            resp = client.post("/signin", data={"token": world.token("bob"), "csrf_token": csrf, "next": target})
            assert resp.status_code == 303 and resp.headers["location"] == "/", target
            csrf = _cookie_and_csrf(client)
        assert client.get("/static/../app.py").status_code == 404
        assert client.get("/static/%2e%2e/app.py").status_code == 404
        assert client.request("PUT", "/keys").status_code == 405
        page = client.get("/signin")
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
