"""``./tq serve`` (issue 26, M1): help answers at once, and the front ends are built only to serve.

Each test runs a copy of ``tq`` in a directory of its own that shares this checkout's ``.venv``
(so nothing is installed) and has the front ends' sources but no build, with a fake ``node`` and
``npm`` first on ``PATH``: the fake npm records each call and "builds" by writing
``dist/index.html``. ``serve`` is given an invalid flag, so the real ``turnqueue serve`` exits at
once (status 2) after whatever ``tq`` did before it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("frontend_examples/web", "graphiql")

FAKE_NPM = """#!/bin/sh
echo "$PWD $*" >> "$NPM_CALLS"
case "$*" in
  ci*) mkdir -p node_modules && touch node_modules/.package-lock.json ;;
  "run build") mkdir -p dist && echo '<!doctype html>' > dist/index.html ;;
esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of ``tq`` beside this checkout's venv and the front ends' sources (no ``dist``)."""
    if not (REPO / ".venv" / "bin" / "turnqueue").exists():
        pytest.skip("needs ./tq's .venv (run through ./tq test)")
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("tq", "pyproject.toml", "requirements.lock"):
        shutil.copy2(REPO / name, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    for front_end in FRONT_ENDS:
        target = root / front_end
        target.mkdir(parents=True)
        for name in ("index.html", "package.json", "package-lock.json", "vite.config.ts"):
            shutil.copy2(REPO / front_end / name, target / name)
        shutil.copytree(REPO / front_end / "src", target / "src")
    return root


def fake_node(tmp_path: Path, version: str = "v20.19.0") -> dict[str, str]:
    """An environment whose ``node`` says it is ``version`` and whose ``npm`` records its calls."""
    real_node = shutil.which("node")
    if real_node is None:
        pytest.skip("needs node (tq's version check runs in it)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    pretend = (
        "Object.defineProperty(process, 'versions', "
        f"{{value: {{...process.versions, node: '{version.lstrip('v')}'}}}});"
    )
    # `node -e SCRIPT` runs SCRIPT in the real node, which reports `version`.
    (bin_dir / "node").write_text(
        f'#!/bin/sh\n[ "$1" = -e ] && exec {real_node} -e "{pretend}$2"\nexec {real_node} "$@"\n'
    )
    (bin_dir / "npm").write_text(FAKE_NPM)
    for tool in ("node", "npm"):
        (bin_dir / tool).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "NPM_CALLS": str(tmp_path / "npm-calls"),
    }


def tq(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkout / "tq"), *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def npm_calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "npm-calls"
    return calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_m1_serve_help_builds_nothing(checkout: Path, tmp_path: Path, flag: str) -> None:
    """``./tq serve --help`` prints the flags without running npm, though nothing is built
    (it used to run ``npm ci`` and two Vite builds first: 64 s on a fresh clone)."""
    done = tq(checkout, fake_node(tmp_path), "serve", flag)
    assert done.returncode == 0, done.stderr
    assert "TURNQUEUE_DATABASE_URL" in done.stdout
    assert npm_calls(tmp_path) == []
    assert not (checkout / "frontend_examples/web/dist").exists()


def test_m1_serve_builds_each_front_end_once_and_says_so(checkout: Path, tmp_path: Path) -> None:
    """Serving builds what is missing, saying what and roughly how long; the next start, with
    the builds newer than their sources, builds nothing."""
    env = fake_node(tmp_path)
    first = tq(checkout, env, "serve", "--queue-max", "-1")
    assert first.returncode == 2, first.stderr  # the invalid flag, after the builds
    for front_end in FRONT_ENDS:
        directory = checkout / front_end
        assert f"{directory} ci --no-audit --no-fund" in npm_calls(tmp_path)
        assert f"{directory} run build" in npm_calls(tmp_path)
        assert (directory / "dist" / "index.html").is_file()
    assert "tq: building the web page in frontend_examples/web" in first.stderr
    assert "tq: building GraphiQL in graphiql" in first.stderr
    assert "the first time" in first.stderr and "tq: built GraphiQL in" in first.stderr

    calls = len(npm_calls(tmp_path))
    again = tq(checkout, env, "serve", "--queue-max", "-1")
    assert again.returncode == 2 and "building" not in again.stderr
    assert len(npm_calls(tmp_path)) == calls


def test_m1_serve_without_a_fitting_node_says_what_is_missing(
    checkout: Path, tmp_path: Path
) -> None:
    """With a Node.js older than Vite needs, nothing is built and ``tq`` says why."""
    done = tq(checkout, fake_node(tmp_path, "v18.19.0"), "serve", "--queue-max", "-1")
    assert done.returncode == 2
    assert npm_calls(tmp_path) == []
    assert "no Node.js 20.19+ with npm" in done.stderr
