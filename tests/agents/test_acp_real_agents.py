"""The real ACP agents, with no key and no route to their providers, through a real
``turnqueue serve`` (SPEC A2, A4, A11): what a new user sees first.

The agents are the pinned npm packages of ``tests/agents/real_agents/package.json`` (Claude Code,
Codex, Gemini CLI, OpenCode), installed there by the ``installed`` fixture on first use (about
15 s and 760 MB; ``npm install`` from the lock file, one process at a time). Each test is skipped,
saying why, when npm or its agent's package is absent, or when ``TURNQUEUE_SKIP_REAL_AGENTS=1``.

The machine has no route to the providers, which is the case under test: each agent must fail
the session or the first turn with its own reason — never a kill of ours presented as its exit,
never its unrelated stderr in the reason — and keep its process after an error answer. Each
agent gets its own ``HOME`` (codex keeps what ``authenticate`` was given in ``~/.codex``). What
each agent did, and how long it took, is in ``docs/agents.md``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from frontend_server import build_lock
from ops.ops_helpers import Client, ProcServer

AGENTS = Path(__file__).with_name("real_agents")
BIN = AGENTS / "node_modules" / ".bin"
SKIP = os.environ.get("TURNQUEUE_SKIP_REAL_AGENTS") == "1"

pytestmark = [
    pytest.mark.skipif(SKIP, reason="TURNQUEUE_SKIP_REAL_AGENTS=1"),
    pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed"),
    pytest.mark.timeout(600),
]

#: profile name → (command, env beyond HOME). Codex twice: without a key, and with one.
PROFILES: dict[str, tuple[list[str], dict[str, str]]] = {
    "claude": (["claude-agent-acp"], {}),
    "codex": (["codex-acp"], {}),
    "codexkey": (["codex-acp"], {"OPENAI_API_KEY": "sk-not-a-real-key"}),
    "gemini": (["gemini", "--acp"], {}),
    "opencode": (["opencode", "acp"], {}),
}

SESSION = """query($s: ID!) { session(id: $s) { state agentError agentStderr
  currentTurn { id status output error errorKind agentStderr } } }"""


@pytest.fixture(scope="module")
def installed() -> Path:
    """``real_agents/node_modules``, installed from the lock file when missing or older."""
    marker = AGENTS / "node_modules" / ".package-lock.json"
    lock = AGENTS / "package-lock.json"
    with build_lock(AGENTS):  # two test workers must not install at once
        if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
            # `npm install` with the lock, not `npm ci`: npm 11 writes opencode's optional
            # per-platform packages for this platform only, and `npm ci` then refuses the lock.
            # --ignore-scripts: node-pty's would compile (gemini runs without it); opencode's
            # only links its platform's binary, which is done here, offline.
            npm = ["npm", "install", "--no-save", "--ignore-scripts", "--no-audit", "--no-fund"]
            link = ["node", "postinstall.mjs"]
            for argv, cwd in ((npm, AGENTS), (link, AGENTS / "node_modules" / "opencode-ai")):
                done = subprocess.run(
                    argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
                )
                if done.returncode != 0:
                    marker.unlink(missing_ok=True)  # try again next time
                    pytest.skip(f"the real agents could not be installed: {done.stderr[-2000:]}")
    return BIN


def agents_file(tmp_path: Path, bin_dir: Path) -> Path:
    lines = []
    for name, (command, env) in PROFILES.items():
        home = tmp_path / f"home-{name}"
        home.mkdir()
        argv = ", ".join(f'"{part}"' for part in [str(bin_dir / command[0]), *command[1:]])
        values = ", ".join(f'{k} = "{v}"' for k, v in {"HOME": str(home), **env}.items())
        lines += [
            f"[agents.{name}]",
            'type = "acp"',
            f"command = [{argv}]",
            f"env = {{ {values} }}",
            f'workspace = "{tmp_path / "work"}"',
            "start_timeout = 120",
            "",
        ]
    path = tmp_path / "agents.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture
async def served(installed: Path, tmp_path: Path) -> AsyncIterator[ProcServer]:
    server = ProcServer(
        f"sqlite:///{tmp_path / 'tq.db'}",
        tmp_path / "server.log",
        TURNQUEUE_AGENTS_FILE=str(agents_file(tmp_path, installed)),
        TURNQUEUE_LEASE_SECONDS="30",  # an agent may take long to start; never restarted here
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


def needs(*commands: str) -> None:
    for command in commands:
        if not (BIN / command).exists():
            pytest.skip(f"{command} is not installed in {AGENTS}/node_modules")


async def started(client: Client, agent: str) -> tuple[str, dict[str, Any]]:
    """A new session of ``agent`` once its start is over (ready or FAILED)."""
    session = await client.create_session(agent)

    async def over() -> dict[str, Any] | None:
        data: dict[str, Any] = (await client.data(SESSION, s=session))["session"]
        return data if data["state"] != "STARTING" else None

    return session, await poll(over, f"{agent} to start", timeout=150, every=0.2)


async def first_turn(client: Client, session: str, prompt: str) -> dict[str, Any]:
    sent = await client.ok("sendMessage", "turn { id }", sessionId=session, content=prompt)
    turn_id = sent["turn"]["id"]

    async def ended() -> dict[str, Any] | None:
        turn = (await client.data(SESSION, s=session))["session"]["currentTurn"]
        return turn if turn["id"] == turn_id and turn["status"] != "RUNNING" else None

    # OpenCode retries an unreachable provider for about 65 s, Codex for about 32 s.
    result: dict[str, Any] = await poll(ended, "the turn to end", timeout=300, every=0.5)
    return result


async def auth_of(client: Client, agent: str) -> dict[str, Any]:
    agents = (await client.data("{ agents { name auth { state method message } } }"))["agents"]
    auth: dict[str, Any] = next(a["auth"] for a in agents if a["name"] == agent)
    return auth


async def test_a11_real_claude_code_refuses_the_prompt_and_stays(served: ProcServer) -> None:
    """Claude Code without a key starts, then answers the prompt with -32000: the turn fails
    with that, and the agent (alive) takes the next prompt. Before: 'agent process exited
    (status -9): Error handling request …' and a killed agent."""
    needs("claude-agent-acp")
    async with served.client() as client:
        session, data = await started(client, "claude")
        assert data["state"] == "WAITING_FOR_INPUT", data
        turn = await first_turn(client, session, "Reply with the word pong")
        assert turn["status"] == "FAILED"
        assert turn["error"].startswith(
            "agent error -32000 (authentication): Authentication required."
        )
        assert turn["errorKind"] == "AUTHENTICATION"
        assert "status" not in turn["error"] and "Error handling" not in turn["error"]
        assert "Error handling request" in turn["agentStderr"]
        assert (await auth_of(client, "claude"))["state"] == "REFUSED"
        again = await first_turn(client, session, "And now ping")
        # It answers the prompt after a refusal end_turn with nothing (its own quirk), then
        # refuses again; never an exit: the process that refused took it.
        assert again["errorKind"] != "AGENT_EXITED", again
    assert "ended FAILED: agent error -32000 (authentication)" in served.log_text()


async def test_a11_real_codex_without_a_key_names_its_methods(served: ProcServer) -> None:
    """Codex without a key refuses session/new: the session FAILS with its refusal and its
    methods; its unrelated WARNING goes to agentStderr, not to agentError."""
    needs("codex-acp")
    async with served.client() as client:
        _, data = await started(client, "codex")
        assert data["state"] == "FAILED"
        error = data["agentError"]
        assert error.startswith(
            "agent refused session/new: agent error -32000 (authentication): Authentication "
            "required. The agent's authentication methods: chatgpt (Login with ChatGPT"
        ), error
        assert "openai-api-key (Use OPENAI_API_KEY" in error
        assert "set OPENAI_API_KEY in the profile's env" in error
        assert "WARNING" not in error
        assert "WARNING" in (data["agentStderr"] or "")  # HOME under /tmp: codex says so
        assert (await auth_of(client, "codex"))["state"] == "REFUSED"


async def test_a11_real_codex_with_openai_api_key_authenticates_and_starts(
    served: ProcServer,
) -> None:
    """Codex with OPENAI_API_KEY in its profile's env: turnqueue calls authenticate
    (openai-api-key) before session/new and the session starts (before: refused, as without
    the key); with no route its first turn fails with its own reason, classified."""
    needs("codex-acp")
    async with served.client() as client:
        session, data = await started(client, "codexkey")
        assert data["state"] == "WAITING_FOR_INPUT", data
        auth = await auth_of(client, "codexkey")
        assert (auth["state"], auth["method"]) == ("AUTHENTICATED", "openai-api-key")
        turn = await first_turn(client, session, "Reply with the word pong")
        assert turn["status"] == "FAILED"
        assert turn["errorKind"] == "PROVIDER_UNREACHABLE", turn
        assert turn["error"].startswith("agent error -32603 (provider unreachable): ")
        assert "\x1b[" not in (turn["agentStderr"] or "")


async def test_a11_real_gemini_without_a_key_fails_the_session(served: ProcServer) -> None:
    """Gemini CLI (`gemini --acp`) without a key refuses session/new in its own words."""
    needs("gemini")
    async with served.client() as client:
        _, data = await started(client, "gemini")
        assert data["state"] == "FAILED"
        assert data["agentError"].startswith(
            "agent refused session/new: agent error -32000 (authentication): Gemini API key is "
            "missing or not configured. The agent's authentication methods: "
        ), data["agentError"]
        assert "gemini-api-key (Gemini API key" in data["agentError"]


async def test_a11_real_opencode_says_it_cannot_reach_its_provider(served: ProcServer) -> None:
    """OpenCode starts with its free default model, then (after its own retries) answers that
    it cannot connect: the turn fails with that, classified as provider unreachable."""
    needs("opencode")
    async with served.client() as client:
        session, data = await started(client, "opencode")
        assert data["state"] == "WAITING_FOR_INPUT", data
        turn = await first_turn(client, session, "Reply with the word pong")
        assert turn["status"] == "FAILED"
        assert turn["errorKind"] == "PROVIDER_UNREACHABLE", turn
        assert "Cannot connect to API" in turn["error"]
        assert "status" not in turn["error"]
