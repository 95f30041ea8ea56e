"""Opt-in smoke test against a real ACP agent (SPEC A7): runs only when
``TURNQUEUE_ACP_SMOKE_COMMAND`` names one, e.g.

    TURNQUEUE_ACP_SMOKE_COMMAND="npx -y @zed-industries/claude-agent-acp" \\
        ./tq test tests/agents/test_acp_smoke.py

The agent gets the test's whole environment (its API key included) and works in a temporary
directory; permission requests are rejected unless ``TURNQUEUE_ACP_SMOKE_PERMISSIONS`` says
``allow``. It needs the network the agent needs; the rest of the suite never does.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentType, TurnItem

COMMAND = os.environ.get("TURNQUEUE_ACP_SMOKE_COMMAND", "")

pytestmark = pytest.mark.skipif(not COMMAND, reason="TURNQUEUE_ACP_SMOKE_COMMAND is not set")


@pytest.mark.timeout(600)
async def test_a7_smoke_a_real_agent_answers_two_turns(tmp_path: Path) -> None:
    policy = os.environ.get("TURNQUEUE_ACP_SMOKE_PERMISSIONS", "reject")
    profile = Profile(
        name="smoke",
        type=AgentType.ACP,
        command=tuple(shlex.split(COMMAND)),
        env=dict(os.environ),
        permissions="allow" if policy == "allow" else "reject",
        workspace=tmp_path,
        start_timeout=300,
    )
    agent = AcpAgent(profile)
    try:
        await agent.prepare_session("smoke-session", "smoke-task")
        for prompt in ("Reply with the single word: pong", "Now reply with the word: ping"):
            run = await agent.start(prompt, session_id="smoke-session", turn_id=prompt)
            text = "".join([p async for p in run.stream() if not isinstance(p, TurnItem)])
            result = await run.wait()
            assert result.ok, result.error
            assert text.strip(), "the agent answered nothing"
    finally:
        await agent.aclose()
