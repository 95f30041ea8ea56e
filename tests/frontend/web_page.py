"""Building the example web page and driving it in Debian's Chromium: what the web page's browser
tests share (the fixtures ``web_dist``, ``browser`` and ``context`` are in ``conftest.py``).

The page is built with ``npm ci && npm run build`` when ``dist/`` is missing or older than its
sources. Every wait is on page state (``expect``, ``wait_for_function``); screenshots go to
``tests/frontend/artifacts/``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from frontend_server import CHROMIUM, REPO, Server, build_lock

WEB = REPO / "frontend_examples" / "web"
ARTIFACTS = Path(__file__).parent / "artifacts"

NO_NODE = shutil.which("node") is None or shutil.which("npm") is None
needs_node = pytest.mark.skipif(NO_NODE, reason="node/npm not installed (CI installs them)")
needs_browser = pytest.mark.skipif(
    NO_NODE or not CHROMIUM.exists(),
    reason="needs node/npm and Debian's chromium at /usr/bin/chromium "
    "(CI: apt-get install -y chromium)",
)


def _newest(paths: list[Path]) -> float:
    return max(p.stat().st_mtime for p in paths if p.exists())


def npm(*args: str) -> None:
    result = subprocess.run(["npm", *args], cwd=WEB, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"npm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def ensure_node_modules() -> None:
    installed = WEB / "node_modules" / ".package-lock.json"
    with build_lock(WEB):  # two test workers must not install at once
        if not installed.exists() or installed.stat().st_mtime < _newest(
            [WEB / "package-lock.json"]
        ):
            npm("ci", "--no-audit", "--no-fund")


def built_dist() -> Path:
    """``frontend_examples/web/dist``, (re)built when missing or older than its sources."""
    sources = [
        WEB / name for name in ("index.html", "package.json", "package-lock.json", "vite.config.ts")
    ]
    sources += list((WEB / "src").rglob("*"))
    index = WEB / "dist" / "index.html"
    ensure_node_modules()
    with build_lock(WEB / "dist"):
        if not index.exists() or index.stat().st_mtime < _newest(sources):
            npm("run", "build")
    return WEB / "dist"


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def open_page(context: Any, server: Server, session_id: str) -> Any:
    """A page on the session, once it is live and has merged its first snapshot."""
    page = context.new_page()
    page.goto(f"{server.base_url}/?session={session_id}")
    wait_ready(page)
    return page


def wait_ready(page: Any, snapshots: int = 1, timeout: float = 5_000) -> None:
    expect(page.locator("#conn")).to_have_text("live", timeout=timeout)
    page.wait_for_function(
        f"Number(document.body.dataset.snapshots ?? 0) >= {snapshots}", timeout=timeout
    )


#: Each turn of the conversation as ``"<prompt> · <STATUS>"``, oldest first.
TURN_SUMMARIES = """() => [...document.querySelectorAll('#turns > li.turn')]
  .map((t) => `${t.dataset.prompt} · ${t.dataset.status}`)"""


def turn_summaries(page: Any) -> list[str]:
    summaries: list[str] = page.evaluate(TURN_SUMMARIES)
    return summaries


def expect_turns(page: Any, expected: list[str], timeout: float = 5_000) -> None:
    """Until the conversation's turns are exactly ``expected`` (``"A · COMPLETED"``, …)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    check = f"(want) => JSON.stringify(({TURN_SUMMARIES})()) === JSON.stringify(want)"
    try:
        page.wait_for_function(check, arg=expected, timeout=timeout)
    except PlaywrightTimeout:
        assert turn_summaries(page) == expected


def expect_current(page: Any, prompt: str, status: str, timeout: float = 5_000) -> None:
    """Until the newest turn is ``prompt`` with ``status``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    check = f"(want) => ({TURN_SUMMARIES})().at(-1) === want"
    want = f"{prompt} · {status}"
    try:
        page.wait_for_function(check, arg=want, timeout=timeout)
    except PlaywrightTimeout:
        assert turn_summaries(page)[-1:] == [want]


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
