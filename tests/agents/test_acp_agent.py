"""The ``acp`` agent on its own, against the fake ACP agent (SPEC A2-A5, A7), in process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from turnqueue.agents import AgentResult, Signal
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.acp_run import PermissionRequest
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentErrorKind, AgentType, AuthState, ItemKind, TurnItem
from turnqueue.engine.items import ItemFold

FAKE = Path(__file__).with_name("fake_acp_agent.py")


def profile(tmp_path: Path, **changes: object) -> Profile:
    base = Profile(
        name="fake",
        type=AgentType.ACP,
        command=(sys.executable, str(FAKE)),
        workspace=tmp_path / "work",
        start_timeout=20,
        idle_timeout=600,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AcpAgent]:
    made = AcpAgent(profile(tmp_path))
    try:
        yield made
    finally:
        await made.aclose()


async def turn(
    agent: AcpAgent, prompt: str, session: str = "s1"
) -> tuple[str, list[TurnItem], AgentResult]:
    run = await agent.start(prompt, session_id=session, turn_id=f"t-{prompt}")
    fold = ItemFold()
    text: list[str] = []
    async for piece in run.stream():
        if isinstance(piece, TurnItem):
            fold.add(piece)
        else:
            text.append(piece)
            fold.add(TurnItem(ItemKind.MESSAGE, {"text": piece}))
    return "".join(text), list(fold.snapshot()), await run.wait()


async def test_a2_one_process_per_session_reused_for_every_turn(agent: AcpAgent) -> None:
    """A2: prepare starts the agent in <workspace>/<task id>; every turn reuses it."""
    await agent.prepare_session("s1", "task-1")
    pid = agent.process_of("s1")
    assert pid is not None
    first, _, result = await turn(agent, "/whoami")
    assert result.ok
    assert f"pid={pid} " in first
    assert first.endswith(f"cwd={agent.workspace / 'task-1'}")
    second, _, _ = await turn(agent, "/whoami")
    assert second == first
    text, items, result = await turn(agent, "hello there")
    assert result.ok and text == "echo: hello there"
    assert items == [TurnItem(ItemKind.MESSAGE, {"text": "echo: hello there"})]


async def test_a3_tool_call_plan_thought_and_raw_items(agent: AcpAgent) -> None:
    """A3: a tool call is one item updated in place; plans, thoughts and unknown kinds too."""
    _, items, result = await turn(agent, "/tool")
    assert result.ok
    assert [i.kind for i in items] == [ItemKind.TOOL_CALL, ItemKind.MESSAGE]
    call = items[0].data
    assert items[0].key == "call-1"
    assert call["title"] == "Read file" and call["kind"] == "read"
    assert call["status"] == "completed"
    assert call["content"][0]["content"]["text"] == "file contents"
    assert call["locations"] == [{"path": "/tmp/notes.txt", "line": 3}]
    _, items, _ = await turn(agent, "/plan")
    assert items[0].kind is ItemKind.PLAN
    assert [e["status"] for e in items[0].data["entries"]] == ["completed", "pending"]
    assert items[0].data["entries"][0] == {
        "content": "look",
        "priority": "high",
        "status": "completed",
    }
    _, items, _ = await turn(agent, "/thought")
    assert items[0] == TurnItem(ItemKind.THOUGHT, {"text": "thinking"})
    _, items, _ = await turn(agent, "/raw")
    assert items[0].kind is ItemKind.RAW
    assert items[0].data["sessionUpdate"] == "available_commands_update"


@pytest.mark.parametrize("reason", ["refusal", "max_tokens", "max_turn_requests"])
async def test_a4_stop_reasons_fail_the_turn_with_that_reason(agent: AcpAgent, reason: str) -> None:
    _, _, result = await turn(agent, f"/{reason}")
    assert result == AgentResult(ok=False, error=reason)
    _, _, result = await turn(agent, "after")
    assert result.ok  # the same process takes the next prompt


async def test_a4_a11_crash_mid_turn_fails_with_its_status_stderr_apart_then_a_fresh_process(
    agent: AcpAgent,
) -> None:
    """A4/A11: the exit is reported with the agent's own status; its stderr tail is kept apart
    from the reason."""
    await agent.prepare_session("s1", "task-1")
    pid = agent.process_of("s1")
    text, _, result = await turn(agent, "/crash")
    assert not result.ok
    assert result.error == "agent process exited (status 3)"
    assert result.error_kind is AgentErrorKind.AGENT_EXITED
    assert result.stderr == "fake agent: fatal error in the middle of a turn"
    assert text == "about to crash"
    who, _, result = await turn(agent, "/whoami")
    assert result.ok and f"pid={pid} " not in who


async def test_a4_resume_with_session_load_when_advertised(tmp_path: Path) -> None:
    """A4: the next process resumes the agent's session with session/load (history dropped)."""
    loader = AcpAgent(profile(tmp_path, env={"FAKE_ACP_LOAD": "1"}))
    try:
        who, _, _ = await turn(loader, "/whoami")
        session = who.split("session=")[1].split()[0]
        assert "loaded=0" in who
        await turn(loader, "/crash")
        again, _, result = await turn(loader, "/whoami")
        assert result.ok
        assert f"session={session} " in again and "loaded=1" in again
        assert "replayed history" not in again
    finally:
        await loader.aclose()


async def test_a4_without_session_load_a_new_agent_session(agent: AcpAgent) -> None:
    who, _, _ = await turn(agent, "/whoami")
    session = who.split("session=")[1].split()[0]
    await turn(agent, "/crash")
    again, _, _ = await turn(agent, "/whoami")
    assert f"session={session} " not in again and "loaded=0" in again


async def test_a5_cancel_sends_session_cancel_and_the_agent_ends_cancelled(
    agent: AcpAgent,
) -> None:
    run = await agent.start("/slow", session_id="s1", turn_id="t1")
    stream = run.stream()
    await anext(stream)  # it is running
    await run.signal(Signal.INTERRUPT)
    async for _ in stream:
        pass
    assert await run.wait() == AgentResult(ok=False, error="cancelled")
    _, _, result = await turn(agent, "after cancel")
    assert result.ok


@pytest.mark.parametrize(("prompt", "ladder"), [("/deaf", 2), ("/stubborn", 3)])
async def test_a5_deaf_agent_is_stopped_by_the_signal_ladder(
    agent: AcpAgent, prompt: str, ladder: int
) -> None:
    run = await agent.start(prompt, session_id="s1", turn_id="t1")
    stream = run.stream()
    await anext(stream)
    for sig in list(Signal)[:ladder]:
        await run.signal(sig)
    async for _ in stream:
        pass
    result = await run.wait()
    assert not result.ok
    _, _, result = await turn(agent, "next")
    assert result.ok  # a fresh process


async def test_a6_permission_policies(tmp_path: Path) -> None:
    """A6: allow picks the first allow option, reject the first reject option; ask without an
    engine answers cancelled."""
    for policy, expected in (("allow", "allow"), ("reject", "reject"), ("ask", "cancelled")):
        made = AcpAgent(profile(tmp_path, permissions=policy))
        try:
            text, _, _ = await turn(made, "/permission")
            assert text == f"permission: {expected}", policy
        finally:
            await made.aclose()


async def test_a6_ask_goes_to_the_engine_and_cancel_answers_cancelled(agent: AcpAgent) -> None:
    asked: list[PermissionRequest] = []
    answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    async def handler(request: PermissionRequest) -> str | None:
        asked.append(request)
        return await answer

    agent.approvals = handler
    run = await agent.start("/permission", session_id="s1", turn_id="t1")
    for _ in range(400):
        if asked:
            break
        await asyncio.sleep(0.025)
    assert asked[0].title == "Write notes.txt"
    assert asked[0].tool_call_id == "call-perm"
    assert asked[0].options == (
        ("allow", "Allow", "allow_once"),
        ("reject", "Reject", "reject_once"),
    )
    await run.signal(Signal.INTERRUPT)  # A5: the pending request is answered cancelled
    text = "".join([p async for p in run.stream() if isinstance(p, str)])
    assert text == "permission: cancelled"
    assert await run.wait() == AgentResult(ok=False, error="cancelled")


async def test_a7_crash_during_a_permission_request(agent: AcpAgent) -> None:
    async def handler(request: PermissionRequest) -> str | None:
        await asyncio.sleep(3600)
        return None

    agent.approvals = handler
    _, _, result = await turn(agent, "/crash-permission")
    assert not result.ok and result.error == "agent process exited (status 4)"
    assert "died while asking" in (result.stderr or "")
    _, _, result = await turn(agent, "next")
    assert result.ok


async def test_a7_five_megabytes_of_stderr_and_a_64k_line(agent: AcpAgent) -> None:
    text, _, result = await turn(agent, "/stderr")
    assert result.ok and text == "wrote 5 MB of stderr"
    text, _, result = await turn(agent, "/bigline")
    assert result.ok and text == "y" * 65536


async def test_a2_start_failure_and_start_timeout(tmp_path: Path) -> None:
    """A2: a start that fails or exceeds the start timeout raises with the reason."""
    from turnqueue.agents import AgentStartError

    missing = AcpAgent(profile(tmp_path, command=("/nonexistent/agent",)))
    with pytest.raises(AgentStartError, match="not found"):
        await missing.prepare_session("s1", "t")
    failing = AcpAgent(profile(tmp_path, env={"FAKE_ACP_FAIL_START": "1"}))
    with pytest.raises(AgentStartError, match="no credentials"):
        await failing.prepare_session("s1", "t")
    await failing.aclose()
    slow = AcpAgent(profile(tmp_path, start_timeout=0.5, env={"FAKE_ACP_START_DELAY": "30"}))
    with pytest.raises(AgentStartError, match="did not start within"):
        await slow.prepare_session("s1", "t")
    assert slow.process_of("s1") is None
    await slow.aclose()


async def test_a2_idle_agent_is_stopped_and_started_again(tmp_path: Path) -> None:
    made = AcpAgent(profile(tmp_path, idle_timeout=0.2))
    try:
        await made.prepare_session("s1", "task")
        pid = made.process_of("s1")
        assert pid is not None
        for _ in range(400):
            if made.process_of("s1") is None:
                break
            await asyncio.sleep(0.025)
        assert made.process_of("s1") is None
        who, _, result = await turn(made, "/whoami")
        assert result.ok and f"pid={pid} " not in who
    finally:
        await made.aclose()


async def test_a11_an_error_answer_fails_the_turn_and_the_agent_takes_the_next_prompt(
    agent: AcpAgent,
) -> None:
    """A11: a JSON-RPC error to session/prompt is the agent's answer: the turn fails with its
    code and message, classified; its stderr is apart; the same process takes the next prompt.
    Before, turnqueue killed the live agent and reported 'agent process exited (status -9)'
    followed by the stderr tail."""
    await agent.prepare_session("s1", "task-1")
    pid = agent.process_of("s1")
    _, _, result = await turn(agent, "/error-auth")
    assert not result.ok and result.error is not None
    assert result.error.startswith("agent error -32000 (authentication): Authentication required")
    assert "lists no authentication methods" in result.error
    assert result.error_kind is AgentErrorKind.AUTHENTICATION
    assert "status" not in result.error and "Error handling request" not in result.error
    assert result.stderr is not None and "Error handling request" in result.stderr
    assert agent.process_of("s1") == pid
    assert agent.auth.state is AuthState.REFUSED
    assert agent.auth.message == "Authentication required"

    _, _, result = await turn(agent, "/error-internal")
    assert result == AgentResult(
        ok=False,
        error="agent error -32603 (internal): Internal error: the model returned nothing",
        error_kind=AgentErrorKind.INTERNAL,
        stderr="ERROR the model returned nothing",  # without its colour codes
    )
    _, _, result = await turn(agent, "/nothing")
    assert result.ok and agent.auth.state is AuthState.REFUSED  # an empty answer proves nothing
    who, _, result = await turn(agent, "/whoami")
    assert result.ok and f"pid={pid} " in who
    assert agent.auth.state is AuthState.NOT_ASKED  # a prompt answered: the refusal is over


async def test_a11_an_env_var_method_the_profile_sets_is_authenticated_before_session_new(
    tmp_path: Path,
) -> None:
    """A11: codex-style: an env_var auth method whose variable the profile's env sets is used
    with `authenticate` before session/new (which the agent refuses otherwise)."""
    made = AcpAgent(profile(tmp_path, env={"FAKE_ACP_AUTH": "1", "FAKE_API_KEY": "k"}))
    try:
        assert made.auth.state is AuthState.UNKNOWN
        who, _, result = await turn(made, "/whoami")
        assert result.ok and " auth=fake-api-key " in who
        assert made.auth.state is AuthState.AUTHENTICATED
        assert made.auth.method == "fake-api-key"
        assert [(m.id, m.env_vars) for m in made.auth.methods] == [
            ("fake-login", ()),
            ("fake-api-key", ("FAKE_API_KEY",)),
        ]
    finally:
        await made.aclose()
    named = AcpAgent(
        profile(
            tmp_path,
            env={"FAKE_ACP_AUTH": "1", "FAKE_API_KEY": "k"},
            auth_method="fake-api-key",
        )
    )
    try:
        who, _, result = await turn(named, "/whoami")
        assert result.ok and " auth=fake-api-key " in who
    finally:
        await named.aclose()


async def test_a11_an_agent_refusing_for_want_of_authentication_names_its_methods(
    tmp_path: Path,
) -> None:
    """A11: no method can be used: the start fails with the agent's own refusal and its methods
    with their descriptions; its unrelated stderr (a WARNING) is kept apart."""
    from turnqueue.agents import AgentStartError

    made = AcpAgent(profile(tmp_path, env={"FAKE_ACP_AUTH": "1"}))
    try:
        with pytest.raises(AgentStartError) as raised:
            await made.prepare_session("s1", "t")
        reason = str(raised.value)
        assert reason.startswith(
            "agent refused session/new: agent error -32000 (authentication): "
            "Authentication required. The agent's authentication methods: "
            "fake-login (Log in: Run `fake login` in a terminal); fake-api-key (Use "
            "FAKE_API_KEY: Requires setting the `FAKE_API_KEY` environment variable.; set "
            "FAKE_API_KEY in the profile's env)."
        ), reason
        assert "WARNING" not in reason
        assert raised.value.kind is AgentErrorKind.AUTHENTICATION
        assert "WARNING: proceeding" in (raised.value.stderr or "")
        assert made.auth.state is AuthState.REFUSED
        assert made.process_of("s1") is None
    finally:
        await made.aclose()
    wrong = AcpAgent(profile(tmp_path, env={"FAKE_ACP_AUTH": "1"}, auth_method="nope"))
    try:
        with pytest.raises(AgentStartError, match="auth_method 'nope' is not one of the agent"):
            await wrong.prepare_session("s1", "t")
    finally:
        await wrong.aclose()


async def test_a5_a11_a_prompt_that_never_answers_is_still_ended_by_cancel(
    agent: AcpAgent,
) -> None:
    """A5/A11: an agent alive but silent, deaf to session/cancel: the stop ladder ends it, and
    the reason names turnqueue's own signal, not an exit of the agent's."""
    run = await agent.start("/hang", session_id="s1", turn_id="t1")
    stream = run.stream()
    await anext(stream)  # the prompt reached it (its one thought)
    await run.signal(Signal.INTERRUPT)
    await run.signal(Signal.TERMINATE)
    async for _ in stream:
        pass
    result = await run.wait()
    assert result.error == (
        "stopped (INTERRUPT, TERMINATE): agent process ended by turnqueue's SIGTERM"
    )
    assert result.error_kind is AgentErrorKind.AGENT_EXITED
    assert result.stderr == "fake agent: waiting for the model provider"
    _, _, result = await turn(agent, "next")
    assert result.ok
