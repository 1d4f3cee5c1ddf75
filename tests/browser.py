"""A real headless Chromium (Debian's `chromium`, installed by .ci/run) driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

# Offline machine: no background fetches (they are refused, many at a time, and slow the start).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    return os.environ.get("AGENTQUEUE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def needs_chromium() -> Callable[[T], T]:
    """Marks a test `browser` (left out of the fast loop), and skips it where Chromium is not installed."""
    skip = pytest.mark.skipif(chromium_path() is None,
                              reason="Debian's chromium is not installed (.ci/run installs it)")
    return lambda test: pytest.mark.browser(skip(test))


@asynccontextmanager
async def chromium() -> AsyncIterator[object]:
    """A headless Chromium browser (Playwright's async API)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
