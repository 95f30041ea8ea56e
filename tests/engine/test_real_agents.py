"""The engine with the real agents: the scripted profile and the command profile running real
processes (SPEC §2, C5: an agent that ignores SIGINT still ends within the bounded timeouts)."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest
from engine_probes import clarification

from turnqueue.agents import build_agent
from turnqueue.bus import EventBus, EventKind
from turnqueue.domain import CancelOutcome, Turn, TurnStatus
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store
from turnqueue.timeouts import within

FAKE = Path(__file__).parents[1] / "agents" / "fake_agent.py"
WAIT = 15.0


@pytest.fixture
async def make_engine(engine_settings: Settings):  # type: ignore[no-untyped-def]
    opened: list[tuple[Engine, object]] = []

    async def factory(agent_command: str = "", turn_seconds: float = 0.05) -> Engine:
        settings = engine_settings.model_copy(
            update={"agent_command": agent_command, "scripted_turn_seconds": turn_seconds}
        )
        store = await open_store(settings)
        agents = {name: build_agent(name, settings) for name in ("scripted", "command")}
        engine = await Engine.open(settings, store, EventBus(256), agents=agents)
        opened.append((engine, store))
        return engine

    yield factory
    for engine, store in reversed(opened):
        await engine.aclose()
        await store.close()  # type: ignore[attr-defined]


async def ended_turn(engine: Engine, session_id: str, prompt: str) -> Turn:
    """Wait (on session events, not on time) until the turn with this prompt has ended."""
    with engine.bus.subscribe(session_id, [EventKind.SESSION]) as sub:
        while True:
            for turn in await engine.turns_of(session_id, 20):
                if turn.prompt == prompt and turn.status is not TurnStatus.RUNNING:
                    return turn
            await within(sub.get(), WAIT)


async def test_scripted_agent_streams_a_reply_asks_and_fails(make_engine) -> None:  # type: ignore[no-untyped-def]
    engine = await make_engine()
    _, session = await engine.create_task("alice", "demo", None)
    with engine.bus.subscribe(session.id, [EventKind.OUTPUT]) as output:
        await engine.send_message("alice", session.id, "hello")
        chunks = []
        while True:
            event = await within(output.get(), WAIT)
            assert event.chunk is not None
            if event.chunk.done:
                break
            chunks.append(event.chunk)
    assert "hello" in "".join(c.text for c in chunks)
    assert [c.offset for c in chunks] == sorted(c.offset for c in chunks)
    done = await ended_turn(engine, session.id, "hello")
    assert done.status is TurnStatus.COMPLETED and done.output == "".join(c.text for c in chunks)

    await engine.send_message("alice", session.id, "/ask which colour?")
    asked = await ended_turn(engine, session.id, "/ask which colour?")
    assert asked.status is TurnStatus.COMPLETED
    asked = await clarification(engine, session.id)
    assert asked is not None and asked.question == "which colour?"
    await engine.answer_clarification("alice", session.id, "red", None)
    await ended_turn(engine, session.id, "red")

    await engine.send_message("alice", session.id, "/fail")
    failed = await ended_turn(engine, session.id, "/fail")
    assert failed.status is TurnStatus.FAILED and failed.error


async def test_command_agent_exit_status_fails_the_turn_and_the_queue_keeps_going(
    make_engine,  # type: ignore[no-untyped-def]
) -> None:
    engine = await make_engine(f"{sys.executable} -u {FAKE} fail 3")
    _, session = await engine.create_task("alice", "demo", "command")
    await engine.set_auto_run("alice", session.id, False, None)
    for content in ("one", "two"):
        await engine.enqueue("alice", session.id, content, None)
    await engine.set_auto_run("alice", session.id, True, None)
    first = await ended_turn(engine, session.id, "one")
    assert first.status is TurnStatus.FAILED and "exit status 3" in (first.error or "")
    second = await ended_turn(engine, session.id, "two")  # nothing lost: the next one ran
    assert second.status is TurnStatus.FAILED
    assert (await engine.queue_status(session.id)).entries == ()
    async with engine.store.read() as tx:  # M6: each turn's group forgotten once gone
        assert (await tx.orphans(set(), host=socket.gethostname(), grace=0)).processes == []


async def test_c5_command_agent_ignoring_sigint_is_escalated_and_the_flag_clears(
    make_engine,  # type: ignore[no-untyped-def]
) -> None:
    engine = await make_engine(f"{sys.executable} -u {FAKE} ignore-int")
    _, session = await engine.create_task("alice", "demo", "command")
    with engine.bus.subscribe(session.id, [EventKind.OUTPUT]) as output:
        await engine.send_message("alice", session.id, "work")
        while "ready" not in ((await within(output.get(), WAIT)).chunk.text):  # type: ignore[union-attr]
            pass
    result = await engine.cancel("alice", session.id)
    assert result.outcome is CancelOutcome.ESCALATED
    assert result.cancellation.pending is False
    turn = await engine.current_turn(session.id)
    assert turn is not None and turn.status is TurnStatus.CANCELLED


async def test_command_agent_that_cannot_start_fails_the_turn(make_engine) -> None:  # type: ignore[no-untyped-def]
    engine = await make_engine("/nonexistent/agent-binary")
    _, session = await engine.create_task("alice", "demo", "command")
    await engine.send_message("alice", session.id, "work")
    turn = await ended_turn(engine, session.id, "work")
    assert turn.status is TurnStatus.FAILED and turn.error


async def test_m6_recovery_kills_the_process_group_a_dead_server_left_behind(
    make_engine,  # type: ignore[no-untyped-def]
) -> None:
    import os

    dead = await make_engine(f"{sys.executable} -u {FAKE} hang")
    _, session = await dead.create_task("alice", "demo", "command")
    with dead.bus.subscribe(session.id, [EventKind.OUTPUT]) as output:
        await dead.send_message("alice", session.id, "work")
        while "ready" not in ((await within(output.get(), WAIT)).chunk.text):  # type: ignore[union-attr]
            pass
    turn = await dead.current_turn(session.id)
    assert turn is not None
    async with dead.store.read() as tx:  # recorded as this instance's (M6)
        (pgid,) = (await tx.orphans(set(), host=socket.gethostname(), grace=0)).processes
    # The server dies: its runtime is gone, the agent's process group lives on.
    dead.core.closing = True
    dead.core.runners.clear()
    if dead.core.cluster is not None:
        await dead.core.cluster.aclose()
    os.killpg(pgid, 0)  # still alive
    restarted = await make_engine(f"{sys.executable} -u {FAKE} hang")
    recovered = await restarted.current_turn(session.id)
    assert recovered is not None and recovered.status is TurnStatus.FAILED
    with pytest.raises(ProcessLookupError):  # killed by recovery (SIGKILL is immediate)
        for _ in range(100):
            os.killpg(pgid, 0)
            await asyncio.sleep(0.02)  # bounded: the kernel reaps the group promptly
