"""The ``command`` agent profile with real processes (SPEC §2 Agents), driven by fake_agent.py."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from turnqueue.agents import CommandAgent, Signal, base
from turnqueue.agents.base import AgentRun, AgentStartError
from turnqueue.agents.command import DRAIN_SECONDS
from turnqueue.timeouts import within

FAKE = Path(__file__).with_name("fake_agent.py")

Start = Callable[..., Awaitable[AgentRun]]


def fake_command(*args: str) -> str:
    return shlex.join([sys.executable, "-u", str(FAKE), *args])


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Every run's tasks (supervisor and pipe helpers) are finished once the test is."""
    yield
    leaked = [t for t in asyncio.all_tasks() if t.get_name().startswith("agent-")]
    assert leaked == []


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    agents: list[CommandAgent] = []

    async def start(*args: str, prompt: str = "hi", **options: int) -> AgentRun:
        agent = CommandAgent(fake_command(*args), **options)
        agents.append(agent)
        return await agent.start(prompt, session_id="session-1", turn_id="turn-1")

    yield start
    for agent in agents:
        await agent.aclose()


class Reader:
    """Reads a run's stream up to a given text, so a test waits on output, not on the clock.
    ``seconds`` only bounds a hang: a fake agent's start (a Python interpreter) under the other
    test worker's load has taken longer than 1.5 s."""

    def __init__(self, run: AgentRun) -> None:
        self.stream = run.stream()
        self.text = ""

    async def until(self, text: str, seconds: float = 15) -> None:
        async with asyncio.timeout(seconds):
            while text not in self.text:
                self.text += await anext(self.stream)

    async def rest(self, seconds: float = 15) -> str:
        async with asyncio.timeout(seconds):
            async for chunk in self.stream:
                self.text += chunk
        return self.text


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped before, or between open and read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, seconds: float = 1.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_command_streams_each_stdout_line_as_a_chunk(start: Start) -> None:
    """SPEC §2: each line it prints is streamed as output; exit status 0 completes the turn."""
    run = await start("lines", "3", "0.01")
    chunks = [chunk async for chunk in run.stream()]
    result = await run.wait()
    assert chunks == ["line 1\n", "line 2\n", "line 3\n"]
    assert result.ok and result.error is None
    assert run.done


async def test_command_output_arrives_while_the_process_runs(start: Start) -> None:
    run = await start("hang")
    reader = Reader(run)
    await reader.until("ready\n")
    assert not run.done
    await run.signal(Signal.KILL)
    await reader.rest()
    assert not (await run.wait()).ok


async def test_command_prompt_goes_to_stdin_which_is_then_closed(start: Start) -> None:
    """SPEC §2: the prompt goes to its standard input (then closed: ``read()`` reaches EOF)."""
    run = await start("echo", prompt="héllo ✓\nsecond line")
    output = "".join([chunk async for chunk in run.stream()])
    assert (await run.wait()).ok
    assert output == "got: héllo ✓\nsecond line\n"


async def test_command_prompt_larger_than_the_pipe_is_fine_when_unread(start: Start) -> None:
    run = await start("no-stdin", prompt="p" * 1_000_000)
    assert (await within(run.wait(), 2)).ok
    assert [chunk async for chunk in run.stream()] == ["bye\n"]


async def test_command_env_has_session_and_turn_ids(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC §2: TURNQUEUE_SESSION_ID and TURNQUEUE_TURN_ID are added to the server's environment."""
    monkeypatch.setenv("TURNQUEUE_TEST_MARK", "inherited")
    run = await start("env")
    lines = "".join([chunk async for chunk in run.stream()]).splitlines()
    assert (await run.wait()).ok
    assert lines == ["session-1", "turn-1", "inherited"]


@pytest.mark.parametrize("code", [1, 3, 127])
async def test_command_a11_nonzero_exit_fails_with_its_status_and_stderr_apart(
    start: Start, code: int
) -> None:
    """SPEC §2: any exit status but 0 fails the turn; A11: stderr's bounded tail is kept apart
    from the reason."""
    run = await start("fail", str(code), stderr_tail_bytes=100)
    await run.wait()
    result = await run.wait()
    assert not result.ok
    assert result.error == f"exit status {code}"
    assert result.stderr is not None and result.stderr.endswith("final words")
    assert len(result.stderr) <= 100  # 10 KB of stderr were written; only the tail is kept


async def test_command_interrupt_sends_sigint(start: Start) -> None:
    run = await start("hang")
    reader = Reader(run)
    await reader.until("ready\n")
    await run.signal(Signal.INTERRUPT)
    await reader.rest()
    result = await run.wait()
    assert not result.ok and result.error is not None
    assert result.error == "interrupted (SIGINT): killed by SIGINT"
    assert "KeyboardInterrupt" in (result.stderr or "")  # Python's own SIGINT handling ran


async def test_command_sigterm_stops_what_ignores_sigint(start: Start) -> None:
    run = await start("ignore-int")
    reader = Reader(run)
    await reader.until("ready\n")
    await run.signal(Signal.INTERRUPT)
    await reader.until("ignored SIGINT\n")
    assert not run.done
    await run.signal(Signal.TERMINATE)
    await reader.rest()
    assert (await run.wait()).error == "interrupted (SIGINT, SIGTERM): killed by SIGTERM"


async def test_command_cancel_escalates_sigint_sigterm_sigkill(start: Start) -> None:
    """SPEC §2 cancel: SIGINT, then SIGTERM, then SIGKILL; only the last stops this process."""
    run = await start("ignore-int-term")
    reader = Reader(run)
    await reader.until("ready\n")
    await run.signal(Signal.INTERRUPT)
    await reader.until("ignored SIGINT\n")
    await run.signal(Signal.TERMINATE)
    await reader.until("ignored SIGTERM\n")
    assert not run.done
    await run.signal(Signal.KILL)
    assert await reader.rest() == "ready\nignored SIGINT\nignored SIGTERM\n"
    result = await run.wait()
    assert result.error == "interrupted (SIGINT, SIGTERM, SIGKILL): killed by SIGKILL"


async def test_command_signals_reach_the_whole_process_group(start: Start) -> None:
    """Cancel signals go to the group: a helper the agent spawned is stopped too."""
    run = await start("helper")
    reader = Reader(run)
    await reader.until("\n")
    helper = int(reader.text.split()[1])
    assert alive(helper)
    await run.signal(Signal.TERMINATE)
    await reader.rest()
    await run.wait()
    assert await gone(helper)


async def test_command_signal_is_idempotent_and_safe_after_end(start: Start) -> None:
    run = await start("ignore-int")
    reader = Reader(run)
    await reader.until("ready\n")
    await run.signal(Signal.INTERRUPT)
    await reader.until("ignored SIGINT\n")
    await run.signal(Signal.INTERRUPT)  # a repeat is delivered again, harmlessly
    await reader.until("ignored SIGINT\nignored SIGINT\n")
    assert not run.done
    await run.signal(Signal.KILL)
    await reader.rest()
    result = await run.wait()
    for sig in Signal:
        await run.signal(sig)  # the group is gone: no error, no stray signal
    assert await run.wait() == result


async def test_command_leftovers_in_the_group_are_killed_when_the_turn_ends(start: Start) -> None:
    """SPEC §2: the turn ends when the process exits; whatever is left in its group is killed."""
    began = time.monotonic()
    run = await start("grandchild")
    reader = Reader(run)
    await reader.until("\n")
    grandchild = int(reader.text.split()[1])
    result = await run.wait()
    assert result.ok
    assert await gone(grandchild)
    # The grandchild held stdout open; its death (not the drain timeout) ended the stream.
    assert time.monotonic() - began < DRAIN_SECONDS


async def test_command_escaped_descendant_does_not_hang_the_turn(start: Start) -> None:
    """A descendant that left the group keeps stdout open; the drain is bounded anyway."""
    run = await start("grandchild", "escape")
    reader = Reader(run)
    await reader.until("\n")
    escapee = int(reader.text.split()[1])
    try:
        result = await within(run.wait(), DRAIN_SECONDS + 0.8)
        assert result.ok
        await reader.rest(seconds=0.1)  # the stream ended too
    finally:
        os.kill(escapee, signal.SIGKILL)


async def test_command_long_lines_are_split_into_bounded_chunks(start: Start) -> None:
    run = await start("long-line", "3500", max_chunk_chars=1000)
    chunks = [chunk async for chunk in run.stream()]
    assert (await run.wait()).ok
    assert [len(c) for c in chunks] == [1000, 1000, 1000, 501]
    assert "".join(chunks) == "x" * 3500 + "\n"


async def test_command_last_line_without_newline_is_streamed(start: Start) -> None:
    run = await start("partial")
    assert [chunk async for chunk in run.stream()] == ["no newline at end"]
    assert (await run.wait()).ok


async def test_command_wait_does_not_need_the_stream_to_be_read(start: Start) -> None:
    """Unread output must not block the process on a full pipe (200 KB > the pipe buffer)."""
    run = await start("long-line", "200000")
    assert (await within(run.wait(), 2)).ok
    assert len("".join([chunk async for chunk in run.stream()])) == 200_001


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "no agent command configured"),
        ("   ", "no agent command configured"),
        ("/nonexistent/agent --x", "agent command not found: /nonexistent/agent"),
        ("agent 'unbalanced", "agent command cannot be parsed"),
        ("{not_executable}", "agent command is not executable"),
    ],
)
async def test_command_that_cannot_start_makes_start_raise(
    tmp_path: Path, command: str, message: str
) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    agent = CommandAgent(command.format(not_executable=script))
    with pytest.raises(AgentStartError, match=message):
        await agent.start("hi", session_id="s", turn_id="t")
    await agent.aclose()


async def test_command_aclose_kills_running_turns_and_refuses_new_ones() -> None:
    agent = CommandAgent(fake_command("ignore-int-term"))
    run = await agent.start("hi", session_id="s", turn_id="t")
    reader = Reader(run)
    await reader.until("ready\n")
    pid = run.pid
    await agent.aclose()
    assert run.done
    assert (await run.wait()).error == "interrupted (SIGKILL): killed by SIGKILL"
    assert await gone(pid)
    with pytest.raises(AgentStartError, match="closed"):
        await agent.start("hi", session_id="s", turn_id="t2")


async def test_command_aclose_cancelling_a_run_still_cleans_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When a run outlasts aclose's grace its task is cancelled: the group dies all the same."""
    monkeypatch.setattr(base, "CLOSE_GRACE_SECONDS", 0.0)
    agent = CommandAgent(fake_command("helper"))
    run = await agent.start("hi", session_id="s", turn_id="t")
    reader = Reader(run)
    await reader.until("\n")
    helper = int(reader.text.split()[1])
    await agent.aclose()
    assert run.task.cancelled()
    assert (await run.wait()).error == "agent closed"
    assert await gone(run.pid) and await gone(helper)
    assert await reader.rest() == reader.text  # the stream ended
