"""A8 against a real third-party ACP agent, offline: fast-agent (PyPI ``fast-agent-mcp``, pinned
below) with its ``passthrough`` model, which echoes each prompt and needs no key and no network.
Its conversation survives a restart of ``turnqueue serve``: the restarted server's agent continues
the agent session (fast-agent advertises ``sessionCapabilities.resume`` and ``loadSession``, and
keeps its sessions under ``--home``), and the session's history, as fast-agent keeps it, holds
the prompts of both server lives.

fast-agent needs Python >= 3.12: the ``fast_agent`` fixture installs it once into
``~/.cache/turnqueue/fast-agent`` (a venv of ``~/.pyenv/versions/3.12.1`` or of ``python3.12``,
by the dev extra's uv: seconds the first time). Skipped, saying why, when no Python 3.12 is
found, the install fails, or ``TURNQUEUE_SKIP_REAL_AGENTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from frontend_server import build_lock
from ops.ops_helpers import ProcServer
from test_acp_conversations_served import CONVERSATION
from test_acp_served import ready_session, run_turn

VERSION = "0.10.48"
CACHE = Path.home() / ".cache" / "turnqueue" / "fast-agent"
FAST_AGENT = CACHE / "bin" / "fast-agent"

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("TURNQUEUE_SKIP_REAL_AGENTS") == "1", reason="TURNQUEUE_SKIP_REAL_AGENTS=1"
    ),
    pytest.mark.timeout(900),
]


def _python312() -> str | None:
    pyenv = Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python"
    if pyenv.exists():
        return str(pyenv)
    return shutil.which("python3.12")


@pytest.fixture(scope="module")
def fast_agent() -> Path:
    """``fast-agent`` of the pinned version, installed into :data:`CACHE` when missing."""
    marker = CACHE / f".installed-{VERSION}"
    with build_lock(CACHE.parent):  # two test workers must not install at once
        if not marker.exists():
            python = _python312()
            if python is None:
                pytest.skip("fast-agent needs Python >= 3.12, and none was found")
            shutil.rmtree(CACHE, ignore_errors=True)
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            uv = str(Path(sys.executable).with_name("uv"))
            steps = (
                [uv, "venv", "-q", "--python", python, str(CACHE)],
                [
                    uv,
                    "pip",
                    "install",
                    "-q",
                    "--python",
                    str(CACHE / "bin" / "python"),
                    f"fast-agent-mcp=={VERSION}",
                ],
            )
            for argv in steps:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=900, check=False
                )
                if done.returncode != 0:
                    pytest.skip(f"fast-agent could not be installed: {done.stderr[-2000:]}")
            marker.touch()
    return FAST_AGENT


async def test_a8_fast_agent_continues_its_conversation_after_a_restart(
    fast_agent: Path, tmp_path: Path
) -> None:
    home = tmp_path / "fast-agent-home"
    agents = tmp_path / "agents.toml"
    agents.write_text(
        f"""
default = "fast"

[agents.fast]
type = "acp"
command = ["{fast_agent}", "--no-update-check", "--home", "{home}", "acp",
           "--model", "passthrough"]
workspace = "{tmp_path / "work"}"
start_timeout = 120
""",
        encoding="utf-8",
    )
    served = ProcServer(
        f"sqlite:///{tmp_path / 'tq.db'}",
        tmp_path / "server.log",
        TURNQUEUE_AGENTS_FILE=str(agents),
        TURNQUEUE_LEASE_SECONDS="30",  # fast-agent takes seconds to start
    )
    await served.start()
    try:
        async with served.client() as client:
            session = await ready_session(client, "fast")
            turn = await run_turn(client, session, "remember 42")
            assert turn["status"] == "COMPLETED" and turn["output"] == "remember 42"
            first = (await client.data(CONVERSATION, s=session))["session"]["agentConversation"]
            assert first["resumed"] == "NEW" and first["canLoad"] is True
        assert served.term() in (0, -15)
        await served.start()
        async with served.client() as client:
            turn = await run_turn(client, session, "what did I ask?")
            assert turn["status"] == "COMPLETED" and turn["output"] == "what did I ask?"
            again = (await client.data(CONVERSATION, s=session))["session"]["agentConversation"]
        expected = "RESUMED" if first["canResume"] else "LOADED"
        assert again["resumed"] == expected and again["resumeError"] is None
        assert again["agentSessionId"] == first["agentSessionId"]
    finally:
        served.stop()
    # The agent's own record of the conversation holds both lives' prompts, in order.
    history = home / "sessions" / first["agentSessionId"] / "history_agent.json"
    prompts = [
        part["text"]
        for message in json.loads(history.read_text(encoding="utf-8"))["messages"]
        if message["role"] == "user"
        for part in message["content"]
    ]
    assert prompts == ["remember 42", "what did I ask?"]
