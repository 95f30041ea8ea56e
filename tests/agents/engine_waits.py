"""Waiting on an in-process engine's agents: the tests here start real agent processes, whose
progress the test can only poll (``until``), never sleep for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from turnqueue.domain import SessionState, Turn
from turnqueue.engine import Engine

ME = "local"
T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T | None]], what: str, timeout: float = 60) -> T:
    """The first truthy value of ``check()``, polled; fails after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := await check()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return value


async def started(engine: Engine, agent: str) -> tuple[str, str]:
    """A new task's session, once its agent has started: (task id, session id)."""
    task, session = await engine.create_task(ME, "t", agent)

    async def waiting() -> bool:
        found = await engine.session(ME, session.id)
        return found is not None and found.state is SessionState.WAITING_FOR_INPUT

    await until(waiting, "the agent to start")
    return task.id, session.id


async def finished(engine: Engine, session_id: str, turn_id: str) -> Turn:
    """The turn, once it has ended."""

    async def ended() -> Turn | None:
        turns = await engine.turns_of(session_id, 10)
        turn = next((t for t in turns if t.id == turn_id), None)
        return turn if turn is not None and turn.ended_at is not None else None

    return await until(ended, "the turn to end")


async def send(engine: Engine, session_id: str, prompt: str) -> Turn:
    """Send ``prompt``; the turn it started at once."""
    admission = await engine.send_message(ME, session_id, prompt)
    assert admission.turn is not None
    return admission.turn
