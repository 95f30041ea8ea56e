"""The agent tests run on both event loops the product can run on.

``turnqueue serve`` runs uvicorn with its default loop, which is **uvloop** (``uvicorn[standard]``);
an embedding application or ``pytest`` uses asyncio's own loop. The two differ where agents live —
subprocess transports, pipes, child reaping — so every async test in ``tests/agents/`` runs once
on each (ids ``[asyncio]`` and ``[uvloop]``), through pytest-asyncio's loop-factory hook.
Tests that drive a real server process (``test_command_served.py``) need the loop only for their
client, so they run once, on asyncio's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}

#: Modules whose loop is only a client's: they run once, on asyncio's loop.
CLIENT_ONLY = {"test_command_served.py"}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in CLIENT_ONLY:
        return {"asyncio": LOOPS["asyncio"]}
    return LOOPS
