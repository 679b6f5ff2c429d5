"""A thin layer over Selenium driving Debian's headless Chromium through chromedriver: the flags this
machine needs, a fresh profile per browser, screenshots kept as test artifacts, and async polling waits
(the local stack's helper tasks keep running while a test waits)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = os.environ.get("MAASCTL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MAASCTL_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1366,900")
ARTIFACTS = Path(os.environ.get("MAASCTL_CONSOLE_ARTIFACTS", ".local/artifacts/console"))


def _replaced_while_read(exc: WebDriverException) -> bool:
    """Chromedriver's other name for a stale element: the page was replaced (a form posted, a redirect)
    between finding an element and reading it, reported as an 'unknown error' from the inspector."""
    return "does not belong to the document" in (exc.msg or "")


class Browser:
    def __init__(self, base_url: str, *, trust_spki: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._profile = tempfile.TemporaryDirectory(prefix="maasctl-chromium-")
        options = Options()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile.name}")
        if trust_spki:  # the test OpenID provider's certificate (and nothing else) is accepted
            options.add_argument(f"--ignore-certificate-errors-spki-list={trust_spki}")
        service = Service(executable_path=CHROMEDRIVER)
        self.driver = webdriver.Chrome(service=service, options=options)
        self.downloads = Path(self._profile.name) / "downloads"
        self.downloads.mkdir()
        self.driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                                    {"behavior": "allow", "downloadPath": str(self.downloads)})

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            self._profile.cleanup()

    # -- navigation and reading ----------------------------------------------------------------------
    def go(self, path: str) -> None:
        self.driver.get(path if path.startswith("http") else self.base_url + path)

    @property
    def path(self) -> str:
        url: str = self.driver.current_url
        return url[len(self.base_url):] if url.startswith(self.base_url) else url

    def text(self, css: str = "main") -> str:
        text: str = self.driver.find_element(By.CSS_SELECTOR, css).text
        return text

    def source(self) -> str:
        src: str = self.driver.page_source
        return src

    def one(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def fill(self, field_id: str, value: str) -> None:
        el = self.driver.find_element(By.ID, field_id)
        el.clear()
        el.send_keys(value)

    def select(self, field_id: str, value: str) -> None:
        from selenium.webdriver.support.select import Select

        Select(self.driver.find_element(By.ID, field_id)).select_by_value(value)

    def click(self, css: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, css).click()

    def button(self, label: str, scope: str = "main") -> None:
        """Click the button (or link styled as one) whose visible text is `label`."""
        root = self.driver.find_element(By.CSS_SELECTOR, scope)
        for el in root.find_elements(By.CSS_SELECTOR, "button, a.button, input[type=submit]"):
            if el.text.strip() == label or el.get_attribute("value") == label:
                el.click()
                return
        raise NoSuchElementException(f"no button {label!r}")

    def run(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    async def until(self, check: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
        """Poll `check` (e.g. reload and look) until it returns something truthy."""
        deadline = asyncio.get_running_loop().time() + timeout
        last: Exception | None = None
        while True:
            try:
                value = check()
                if value:
                    return value
            except (NoSuchElementException, StaleElementReferenceException) as exc:
                last = exc
            except WebDriverException as exc:
                if not _replaced_while_read(exc):
                    raise
                last = exc
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{what} not met within {timeout}s (page {self.path}): {last}\n"
                                     f"{self.text('body')[:2000]}")
            await asyncio.sleep(0.3)

    # -- the console ----------------------------------------------------------------------------------
    def sign_in_with_token(self, token: str) -> None:
        self.go("/signin")
        self.fill("token", token)
        self.button("Sign in with token")

    def models_for_key(self, name: str) -> None:
        """The Models page with the commands of the key named `name` (chosen in the select, as a user does)."""
        self.go("/models")
        option = next(o for o in self.all("#key option") if o.text.startswith(f"{name} ("))
        self.go(f"/models?key={option.get_attribute('value')}")
