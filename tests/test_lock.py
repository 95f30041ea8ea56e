"""Reproducible installs: ``requirements.lock`` pins, with hashes, everything ``pyproject.toml``
asks for (the project's dependencies and its ``dev`` and ``bench`` extras), within its ranges.

``./tq`` installs only from the lock (``--require-hashes``) and then the project with
``--no-deps``, so a dependency added to ``pyproject.toml`` without ``./tq lock`` would be missing.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;\\]+)")


def locked() -> dict[str, tuple[str, int]]:
    """name → (version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    current: str | None = None
    for line in (REPO / "requirements.lock").read_text(encoding="utf-8").splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match[1])
            pins[current] = (match[3], 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
    return pins


def wanted() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [*project["dependencies"]]
    for extra in ("dev", "bench"):
        names += project["optional-dependencies"][extra]
    return [Requirement(n) for n in names]


def test_every_pyproject_dependency_is_locked_within_its_range() -> None:
    pins = locked()
    for requirement in wanted():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: run ./tq lock"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside {requirement}: run ./tq lock"
        )


def test_every_locked_package_has_hashes() -> None:
    pins = locked()
    assert len(pins) > 20
    assert all(hashes for _, hashes in pins.values()), [n for n, (_, h) in pins.items() if not h]


def test_the_install_stamp_covers_the_lock() -> None:
    """``./tq`` reinstalls when the lock changes, and installs from it with hashes required."""
    script = (REPO / "tq").read_text(encoding="utf-8")
    assert 'cat pyproject.toml "$LOCK" | sha256sum' in script
    assert '--require-hashes -r "$LOCK"' in script and "--no-deps -e ." in script
