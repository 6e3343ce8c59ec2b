"""One Chromium for the browser tests of a pytest process, launched once rather than per module.

Playwright's sync API keeps an event loop running in the thread that started it, so while it is up no
asyncio test can run in that thread. The browser therefore stays up only across consecutive tests that
use it: ``tests/conftest.py`` closes it before any test that does not, and the next browser test
launches it again. The suite's order (pytest-django puts tests without the database last, browser
modules side by side) makes that one or two launches per process.
"""

from __future__ import annotations

from typing import Any

from tests.support import services


class Launcher:
    def __init__(self) -> None:
        self._playwright: Any = None
        self._browser: Any = None

    def get(self) -> Any:
        """The running browser (Debian's Chromium driven by Playwright); launched if it is not."""
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        self.close()
        executable = services.require_chromium()
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        try:
            self._browser = self._launch(executable)
        except BaseException:
            self.close()
            raise
        return self._browser

    def another(self, *args: str) -> Any:
        """A second Chromium with ``args`` besides the usual ones, for one test (the caller closes it)."""
        self.get()
        return self._launch(services.require_chromium(), *args)

    def _launch(self, executable: str, *args: str) -> Any:
        return self._playwright.chromium.launch(
            executable_path=executable, args=[*services.CHROMIUM_ARGS, *args], headless=True
        )

    @property
    def running(self) -> bool:
        return self._playwright is not None

    def close(self) -> None:
        browser, playwright = self._browser, self._playwright
        self._browser = self._playwright = None
        try:
            if browser is not None:
                browser.close()
        finally:
            if playwright is not None:
                playwright.stop()


#: This pytest process's browser.
launcher = Launcher()
