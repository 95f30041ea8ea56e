"""The ``acp`` agent on its own, against the fake ACP agent (SPEC A2-A5, A7), in process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from turnqueue.agents import AgentResult, Signal
from turnqueue.agents.acp import AcpAgent, PermissionRequest
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentErrorKind, AgentType, ItemKind, TurnItem
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
