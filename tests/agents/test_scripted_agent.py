"""The ``scripted`` agent profile and ``build_agent`` (SPEC §2 Agents)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from turnqueue.agents import AGENT_NAMES, CommandAgent, ScriptedAgent, Signal, build_agent
from turnqueue.agents.base import AgentRun, AgentStartError
from turnqueue.agents.scripted import (
    CHUNKS,
    STUBBORN_FACTOR,
    STUBBORN_MIN_SECONDS,
    plan,
    reply_for,
)
from turnqueue.errors import ErrorCode, InvalidInput
from turnqueue.settings import Settings
from turnqueue.timeouts import within


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Every run's task is finished once the test is (nothing leaks)."""
    yield
    leaked = [t for t in asyncio.all_tasks() if t.get_name().startswith("agent-")]
    assert leaked == []


@pytest.fixture
async def agent() -> AsyncIterator[ScriptedAgent]:
    agent = ScriptedAgent(turn_seconds=0.0)
    yield agent
    await agent.aclose()


async def start(agent: ScriptedAgent, prompt: str, seconds: float = 0.0) -> AgentRun:
    agent.turn_seconds = seconds
    return await agent.start(prompt, session_id="s1", turn_id=f"t-{prompt[:10]}")


async def collect(run: AgentRun) -> list[str]:
    return [chunk async for chunk in run.stream()]


async def test_scripted_reply_is_deterministic_and_streamed_in_chunks(agent: ScriptedAgent) -> None:
    """SPEC §2: each prompt gets a deterministic reply, streamed in several chunks."""
    first = await start(agent, "hello there")
    chunks = await collect(first)
    result = await first.wait()
    again = await collect(await start(agent, "hello there"))

    assert result.ok and result.error is None and result.clarification is None
    assert "".join(chunks) == reply_for("hello there")
    assert "".join(chunks).startswith("You said: hello there\n")
    assert 1 < len(chunks) <= CHUNKS
    assert again == chunks
    assert first.done


async def test_scripted_chunks_are_spread_over_turn_seconds(agent: ScriptedAgent) -> None:
    """SPEC §2: the reply is streamed over TURNQUEUE_SCRIPTED_TURN_SECONDS, not all at once."""
    began = time.monotonic()
    run = await start(agent, "slowly", seconds=0.25)
    arrivals = [time.monotonic() - began async for _ in run.stream()]
    await run.wait()
    ended = time.monotonic() - began

    assert len(arrivals) == CHUNKS
    assert arrivals[0] < 0.1  # the first chunk comes at once
    assert arrivals[-1] >= 0.15  # the last one only after most of the turn
    assert 0.24 <= ended < 0.6


async def test_scripted_zero_turn_seconds_streams_immediately(agent: ScriptedAgent) -> None:
    began = time.monotonic()
    run = await start(agent, "fast", seconds=0.0)
    chunks = await collect(run)
    assert (await run.wait()).ok
    assert "".join(chunks) == reply_for("fast")
    assert time.monotonic() - began < 0.05


async def test_scripted_ask_streams_the_question_and_asks_a_clarification(
    agent: ScriptedAgent,
) -> None:
    """SPEC §2 ``/ask``: the question is the turn's output and the result's clarification."""
    run = await start(agent, "/ask Which branch should I use?")
    output = "".join(await collect(run))
    result = await run.wait()
    assert output == "Which branch should I use?"
    assert result.ok and result.clarification == "Which branch should I use?"


@pytest.mark.parametrize(
    ("prompt", "error"),
    [("/fail", "scripted failure"), ("/fail disk full", "scripted failure: disk full")],
)
async def test_scripted_fail_fails_the_turn(agent: ScriptedAgent, prompt: str, error: str) -> None:
    """SPEC §2 ``/fail``: the turn fails."""
    run = await start(agent, prompt)
    assert await collect(run)  # it says something first
    result = await run.wait()
    assert not result.ok and result.error == error


async def test_scripted_interrupt_stops_promptly(agent: ScriptedAgent) -> None:
    run = await start(agent, "a long answer", seconds=1.0)
    stream = run.stream()
    await anext(stream)  # it is running
    signalled = time.monotonic()
    await run.signal(Signal.INTERRUPT)
    rest = [chunk async for chunk in stream]
    result = await run.wait()

    assert time.monotonic() - signalled < 0.1  # not the ~0.8 s the turn had left
    assert len(rest) < CHUNKS - 1
    assert not result.ok and result.error == "interrupted"


async def test_scripted_stubborn_ignores_interrupt_until_terminate(agent: ScriptedAgent) -> None:
    """``/stubborn`` needs the engine's escalation: SIGINT-like INTERRUPT is ignored."""
    run = await start(agent, "/stubborn please", seconds=0.01)
    stream = run.stream()
    await anext(stream)
    await run.signal(Signal.INTERRUPT)
    await anext(stream)  # it goes on producing after the interrupt
    assert not run.done
    await run.signal(Signal.TERMINATE)
    await within(collect_rest(stream), 0.1)
    result = await run.wait()
    assert not result.ok and result.error == "terminated"


async def test_scripted_stubborn_bang_needs_kill(agent: ScriptedAgent) -> None:
    run = await start(agent, "/stubborn! really", seconds=0.01)
    stream = run.stream()
    await anext(stream)
    await run.signal(Signal.INTERRUPT)
    await run.signal(Signal.TERMINATE)
    await anext(stream)  # both ignored
    assert not run.done
    await run.signal(Signal.KILL)
    await within(collect_rest(stream), 0.1)
    assert (await run.wait()).error == "killed"


def test_scripted_stubborn_lasts_at_least_its_minimum() -> None:
    """A ``/stubborn`` turn outlives a short cancel timeout whatever ``turn_seconds`` is: it
    lasts ten times that, and never less than its minimum (read off its plan, not a clock)."""
    assert plan("/stubborn", 0.0).seconds == STUBBORN_MIN_SECONDS
    assert plan("/stubborn", 0.5).seconds == 0.5 * STUBBORN_FACTOR
    assert plan("/stubborn", 0.0).ignores == {Signal.INTERRUPT}
    assert plan("/stubborn!", 0.0).ignores == {Signal.INTERRUPT, Signal.TERMINATE}
    assert plan("hello", 0.0).seconds == 0.0


async def collect_rest(stream: AsyncIterator[str]) -> list[str]:
    return [chunk async for chunk in stream]


async def test_scripted_signal_is_idempotent_and_safe_after_end(agent: ScriptedAgent) -> None:
    run = await start(agent, "done soon")
    await collect(run)
    result = await run.wait()
    for sig in Signal:
        await run.signal(sig)
        await run.signal(sig)
    assert await run.wait() == result and result.ok


async def test_scripted_wait_does_not_need_the_stream_and_keeps_output(
    agent: ScriptedAgent,
) -> None:
    run = await start(agent, "unread", seconds=0.02)
    assert (await run.wait()).ok
    assert "".join(await collect(run)) == reply_for("unread")
    with pytest.raises(RuntimeError):
        await anext(run.stream())  # one consumer only


async def test_scripted_cancelled_waiter_does_not_stop_the_run(agent: ScriptedAgent) -> None:
    run = await start(agent, "keep going", seconds=0.1)
    with pytest.raises(TimeoutError):
        await within(run.wait(), 0.01)
    assert not run.done
    assert (await run.wait()).ok


async def test_scripted_aclose_stops_running_turns_and_refuses_new_ones() -> None:
    agent = ScriptedAgent(turn_seconds=0.0)
    run = await agent.start("/stubborn!", session_id="s", turn_id="t")
    await agent.aclose()
    assert run.done
    assert (await run.wait()).error == "killed"
    with pytest.raises(AgentStartError):
        await agent.start("more", session_id="s", turn_id="t2")


def test_build_agent_known_profiles() -> None:
    """SPEC §2: ``scripted`` and ``command`` are the profiles, configured from settings."""
    settings = Settings(scripted_turn_seconds=0.5, agent_command="my-agent --flag")
    scripted = build_agent("scripted", settings)
    command = build_agent("command", settings)
    assert isinstance(scripted, ScriptedAgent) and scripted.turn_seconds == 0.5
    assert isinstance(command, CommandAgent) and command.command == "my-agent --flag"
    assert [build_agent(n, settings).name for n in AGENT_NAMES] == list(AGENT_NAMES)


@pytest.mark.parametrize("name", ["", "Scripted", "shell", "command "])
def test_build_agent_unknown_name_is_invalid_input(name: str) -> None:
    """SPEC §2: an unknown agent name is INVALID_INPUT."""
    with pytest.raises(InvalidInput) as caught:
        build_agent(name, Settings())
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert caught.value.field == ["agent"]
