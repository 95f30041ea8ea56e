"""The stop ladder on its own (``TurnRunner.stop``): no database, no engine (C4)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from engine_helpers import WAIT, ManualAgent, ManualRun

from turnqueue.agents import Signal
from turnqueue.bus import EventBus
from turnqueue.domain import CancelOutcome, MessageSource, Turn, TurnStatus
from turnqueue.engine.runner import Ending, StopLadder, TurnRunner

LADDER = StopLadder(interrupt_wait=0.05, escalation_wait=0.05, bound=WAIT)


class NoLog:
    """A store that keeps no output log: the ladder is under test here, not the log (O1)."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[NoLog]:
        yield self

    async def append_output(self, batches: dict[str, Any]) -> set[str]:
        return set(batches)  # as if each turn had ended: its log takes nothing more


class BrokenRun(ManualRun):
    """A run whose signals fail (a dead pipe, a vanished process)."""

    async def signal(self, signal: Signal) -> None:
        self.signals.append(signal)
        raise RuntimeError("cannot signal")


class BrokenAgent(ManualAgent):
    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> ManualRun:
        run = BrokenRun(prompt, session_id, turn_id)
        self.runs.append(run)
        self.started.put_nowait(run)
        return run


async def running(prompt: str, agent: ManualAgent) -> tuple[TurnRunner, ManualRun, list[Ending]]:
    turn = Turn(
        "t1",
        "s1",
        prompt,
        MessageSource.USER,
        TurnStatus.RUNNING,
        "",
        None,
        datetime.now(UTC),
        None,
    )
    runner = TurnRunner(turn, agent, EventBus(16), NoLog())  # type: ignore[arg-type]
    ends: list[Ending] = []

    async def on_end(r: TurnRunner, ending: Ending) -> None:
        ends.append(ending)
        r.finished.set()  # what the engine does once the end has committed

    runner.task = asyncio.create_task(runner.run(on_end))
    return runner, await agent.next_run(), ends


async def test_c4_an_obeyed_interrupt_stops_the_turn() -> None:
    """C4: SIGINT first; an agent that stops on it is STOPPED, with nothing escalated."""
    runner, run, ends = await running("work", ManualAgent())
    assert await runner.stop(LADDER) is CancelOutcome.STOPPED
    assert run.signals == [Signal.INTERRUPT] and len(ends) == 1


async def test_c4_an_ignored_interrupt_escalates_to_terminate() -> None:
    """C4: an agent that ignores SIGINT gets SIGTERM after the interrupt wait: ESCALATED."""
    runner, run, _ = await running("/stubborn", ManualAgent())
    assert await runner.stop(LADDER) is CancelOutcome.ESCALATED
    assert run.signals == [Signal.INTERRUPT, Signal.TERMINATE]


async def test_c4_an_agent_deaf_to_every_signal_is_abandoned() -> None:
    """C4: SIGINT, SIGTERM, SIGKILL, each waited for; then the agent is abandoned (its task
    cancelled, which still records the end): TIMED_OUT."""
    runner, run, ends = await running("/deaf", ManualAgent())
    assert await runner.stop(LADDER) is CancelOutcome.TIMED_OUT
    assert run.signals[:3] == [Signal.INTERRUPT, Signal.TERMINATE, Signal.KILL]
    assert [e.result.error for e in ends] == ["interrupted"]
    with pytest.raises(asyncio.CancelledError):
        assert runner.task is not None
        await runner.task


async def test_c4_a_signal_that_fails_abandons_the_agent_and_never_raises() -> None:
    """C4, C5: a failing signal does not escape the ladder (the cancellation must still end
    and release its reference): the agent is abandoned and the outcome is TIMED_OUT."""
    runner, run, ends = await running("work", BrokenAgent())
    assert await runner.stop(LADDER) is CancelOutcome.TIMED_OUT
    assert run.signals[0] is Signal.INTERRUPT and len(ends) == 1


async def test_c4_the_whole_ladder_is_bounded() -> None:
    """C4: the ladder as a whole ends at its bound, however long each rung would wait."""
    slow = StopLadder(interrupt_wait=WAIT * 10, escalation_wait=0.05, bound=0.05)
    runner, run, ends = await running("/deaf", ManualAgent())
    assert await runner.stop(slow) is CancelOutcome.TIMED_OUT
    assert run.signals[0] is Signal.INTERRUPT and Signal.TERMINATE not in run.signals
    assert len(ends) == 1
