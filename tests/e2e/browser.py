"""A real headless Chromium (Debian's, through its ChromeDriver), driven from async tests.

Selenium blocks, and the pages it loads are served by the test's own event loop, so every
call runs in a thread. Waits poll the page with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    # This machine's network is closed: without these, Chromium keeps calling home.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
]


class Browser:
    def __init__(self, driver: Any) -> None:
        self.driver = driver

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(function, *args)

    async def open(self, url: str) -> None:
        await self._call(self.driver.get, url)

    async def text(self, css: str) -> str:
        return str(await self._call(lambda: self.driver.find_element("css selector", css).text))

    async def count(self, css: str) -> int:
        return len(await self._call(self.driver.find_elements, "css selector", css))

    async def click(self, css: str) -> None:
        await self._call(lambda: self.driver.find_element("css selector", css).click())

    async def type(self, css: str, text: str) -> None:
        await self._call(lambda: self.driver.find_element("css selector", css).send_keys(text))

    async def run(self, script: str) -> Any:
        return await self._call(self.driver.execute_script, script)

    async def until(self, condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Poll `condition` (a coroutine function or a plain one) until it returns a truthy
        value; fail naming `what` and the page's text when `timeout` passes."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                found = condition()
                if asyncio.iscoroutine(found):
                    found = await found
            except Exception:  # the element is not there yet, or was just replaced
                found = None
            if found:
                return found
            if asyncio.get_running_loop().time() > deadline:
                body = await self._call(lambda: self.driver.find_element("tag name", "body").text)
                raise AssertionError(f"{what}: not within {timeout}s; the page shows:\n{body}")
            await asyncio.sleep(0.1)

    async def has_text(self, css: str, text: str, timeout: float = 20.0) -> None:
        async def shows() -> bool:
            return text in await self.text(css)

        await self.until(shows, f"{css} showing {text!r}", timeout)

    async def screenshot(self, path: Path) -> None:
        """The whole page, however long (through the DevTools protocol)."""

        def shoot() -> bytes:
            size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            shot = self.driver.execute_cdp_cmd(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True, "clip": clip},
            )
            return base64.b64decode(shot["data"])

        path.write_bytes(await self._call(shoot))

    @property
    def url(self) -> str:
        return str(self.driver.current_url)


@contextlib.contextmanager
def headless_chromium() -> Iterator[Browser]:
    """Headless Chromium. Missing, the tests are skipped with the reason, unless
    TETHER_REQUIRE_BROWSER is set (CI sets it: there they must run)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        reason = "the dashboard tests need Debian's chromium and chromium-driver (apt install)"
        if os.environ.get("TETHER_REQUIRE_BROWSER"):
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield Browser(driver)
    finally:
        driver.quit()
