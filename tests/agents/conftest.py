"""The agent tests run on both event loops the product can run on (see tests/event_loops.py).

The agents are where the loops differ most — subprocess transports, pipes, child reaping — so
every async test in ``tests/agents/`` runs on asyncio's loop and on uvloop (``[asyncio]``,
``[uvloop]``). ``test_command_served.py``, ``test_acp_served.py`` and ``test_acp_real_agents.py``
drive real server processes, which run on uvloop whatever the test's loop is; their loop drives
only the clients, so they run once, on asyncio's.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from event_loops import LoopFactory, loops_for

# test_command_served.py drives real servers with the cluster tests' helpers,
# test_acp_items_served.py reads SSE with the ops tests' helpers, and test_acp_real_agents.py
# installs its agents under the frontend tests' build lock.
for _helpers in ("cluster", "ops", "frontend"):
    _path = str(Path(__file__).resolve().parents[1] / _helpers)
    if _path not in sys.path:
        sys.path.append(_path)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    return loops_for(item, except_=SERVED)


#: Modules whose agents run inside a ``turnqueue serve`` process (uvloop), not in the test's loop.
SERVED = {
    "test_command_served.py",
    "test_acp_served.py",
    "test_acp_real_agents.py",
    "test_stalls_served.py",
    "test_acp_conversations_served.py",
    "test_acp_fast_agent.py",
}
