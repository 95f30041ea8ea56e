"""Fixtures for the frontend examples' tests (SPEC U2): ``server_factory`` starts a REAL
``turnqueue serve`` (see :mod:`frontend_server`); ``web_dist``, ``browser`` and ``context`` are the
built web page and Debian's Chromium driven by Playwright (see :mod:`web_page`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from frontend_server import CHROMIUM, CHROMIUM_FLAGS, REPO, Server, ServerFactory, run_server
from web_page import built_dist

if str(REPO) not in sys.path:  # `frontend_examples` is imported from the checkout
    sys.path.insert(0, str(REPO))


@pytest.fixture
def server_factory(tmp_path: Path) -> ServerFactory:
    def start(**env: str) -> contextlib.AbstractContextManager[Server]:
        directory = tmp_path / f"server{len(list(tmp_path.glob('server*')))}"
        directory.mkdir()
        return run_server(directory, **env)

    return start


@pytest.fixture(scope="session")
def web_dist() -> Path:
    """``frontend_examples/web/dist``, (re)built when missing or older than its sources."""
    return built_dist()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    yield context
    context.close()
