"""The API tests on the newest Strawberry and graphql-core that pyproject.toml's ranges allow.

requirements.lock keeps the versions every run is tested on; this checks that the ranges users
install from are true too. When the newest allowed versions are the locked ones there is nothing
more to run (the suite ran on them); otherwise a separate venv (``.venv-newest``) gets them and
runs tests/api, the executor workaround's canary (tests/api/test_api_subscription_memory.py)
among them. Run by .ci/run; by hand: ``.venv/bin/python scripts/newest_graphql.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graphql-core", "strawberry-graphql")


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = [d for d in project["dependencies"] if re.split(r"[<>=!~ \[]", d)[0] in PACKAGES]
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"]
    report = subprocess.run(
        [*pip, "--no-deps", "--report", "-", *ranges],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    chosen = [i["metadata"] for i in json.loads(report)["install"]]
    newest = sorted(f"{m['name']}=={m['version']}" for m in chosen)
    locked = sorted(f"{n}=={importlib.metadata.version(n)}" for n in PACKAGES)
    if newest == locked:
        print(f"newest_graphql: the newest allowed versions are the locked ones: {locked}")
        return 0
    print(f"newest_graphql: locked {locked}; testing the newest allowed: {newest}", flush=True)
    venv = ROOT / ".venv-newest"
    shutil.rmtree(venv, ignore_errors=True)
    python = str(venv / "bin" / "python")
    steps = [
        ["python3", "-m", "venv", str(venv)],
        [python, "-m", "pip", "install", "-q", "--require-hashes", "-r", "requirements.lock"],
        [python, "-m", "pip", "install", "-q", "--no-deps", "-e", ".", *newest],
        [python, "-m", "pytest", "tests/api", "-q", "-p", "no:randomly"],
    ]
    for step in steps:
        if subprocess.run(step, cwd=ROOT).returncode:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
