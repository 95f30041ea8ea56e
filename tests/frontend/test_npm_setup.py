"""Setting up the front ends prints no warning on the Node.js this machine has (issue 26).

``npm ci --dry-run`` resolves exactly what ``npm ci`` would install from the committed lock and
reports the same warnings (an engine a package does not support, ``EBADENGINE``; a peer
dependency conflict, ``ERESOLVE``) without installing anything, in about a second. It runs on a
copy of ``package.json`` and ``package-lock.json``, so the checkout's ``node_modules`` is not
touched. Skipped without npm.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from frontend_server import REPO
from web_page import NO_NODE

pytestmark = pytest.mark.skipif(NO_NODE, reason="node/npm not installed (CI installs them)")


@pytest.mark.parametrize("front_end", ["frontend_examples/web", "graphiql"])
def test_npm_ci_of_the_committed_lock_warns_of_nothing(tmp_path: Path, front_end: str) -> None:
    """No ``npm warn`` (EBADENGINE, ERESOLVE or any other) from ``npm ci`` of the lock."""
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(REPO / front_end / name, tmp_path / name)
    done = subprocess.run(
        ["npm", "ci", "--dry-run", "--no-audit", "--no-fund"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    warnings = [line for line in output.splitlines() if "warn" in line.lower()]
    assert warnings == [], f"npm ci on Node {node.stdout.strip()} warns:\n" + "\n".join(warnings)
