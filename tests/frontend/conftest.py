"""Fixtures for the frontend examples' tests (SPEC U2): ``server_factory`` starts a REAL
``turnqueue serve`` (see :mod:`frontend_server`)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from frontend_server import REPO, Server, ServerFactory, run_server

if str(REPO) not in sys.path:  # `frontend_examples` is imported from the checkout
    sys.path.insert(0, str(REPO))


@pytest.fixture
def server_factory(tmp_path: Path) -> ServerFactory:
    def start(**env: str) -> contextlib.AbstractContextManager[Server]:
        directory = tmp_path / f"server{len(list(tmp_path.glob('server*')))}"
        directory.mkdir()
        return run_server(directory, **env)

    return start
