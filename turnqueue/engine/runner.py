"""One running turn in this process: its agent run, its streamed output and its end.

The runner only runs the agent, logs its output (:class:`~turnqueue.engine.outputlog.OutputLog`,
O1) and stops it (the stop ladder, :meth:`TurnRunner.stop`); what the end means for the session
(status, clarification, drain, workflow) is decided by :mod:`turnqueue.engine.turns` under the
session lock. The agent's stream yields ``str`` (a MESSAGE
text chunk) or :class:`~turnqueue.domain.TurnItem`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from turnqueue.agents import Agent, AgentResult, AgentRun, Signal, error_text
from turnqueue.bus import EventBus
from turnqueue.domain import CancelOutcome, OutputChunk, Turn, TurnStatus
from turnqueue.engine.outputlog import OutputLog
from turnqueue.logs import bind
from turnqueue.store import Store
from turnqueue.timeouts import within

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ending:
    result: AgentResult
    output: str


@dataclass(frozen=True, slots=True)
class StopLadder:
    """How long each rung of the stop ladder waits (settings ``cancel_timeout`` and
    ``escalation_timeout``) and the bound on the whole (``cancel_operation_timeout``, C4)."""

    interrupt_wait: float
    escalation_wait: float
    bound: float


class TurnRunner:
    def __init__(self, turn: Turn, agent: Agent, bus: EventBus, store: Store) -> None:
        self.turn = turn
        self._agent = agent
        #: the agent's run of this turn, once it has started (None before, or if it failed)
        self.agent_run: AgentRun | None = None
        self.log = OutputLog(turn, store, bus)
        self.ending = False  # set under the session lock once the end has been decided
        #: the agent's run is over and its end is being recorded (not to be abandoned)
        self._agent_done = False
        self.finished = asyncio.Event()  # set once the end has been committed
        self.final_status: TurnStatus | None = None
        self._signals: list[Signal] = []
        self.task: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return self.turn.session_id

    def snapshot(self, after: int = 0) -> OutputChunk:
        """What subscribers have been sent so far, from character ``after`` (O2): the log's
        committed text, which is exactly what the bus has published."""
        text = self.log.committed_text
        after = max(0, min(after, len(text)))
        return OutputChunk(
            self.session_id, self.turn.id, after, text[after:], False, TurnStatus.RUNNING
        )

    async def run(self, on_end: Callable[[TurnRunner, Ending], Awaitable[None]]) -> None:
        """Run the agent to its end, then hand the end to ``on_end`` (always, C5)."""
        bind(session_id=self.session_id, turn_id=self.turn.id)  # this task's logs carry them
        try:
            await self._run_agent(on_end)
        finally:
            if not self.log.detached:  # whatever ended the run (the end detaches first)
                await asyncio.shield(self.log.detach())

    async def _run_agent(self, on_end: Callable[[TurnRunner, Ending], Awaitable[None]]) -> None:
        try:
            self.agent_run = await self._agent.start(
                self.turn.prompt, session_id=self.session_id, turn_id=self.turn.id
            )
            # A signal that arrived while the agent was starting is delivered now.
            for sig in self._signals:
                await self.agent_run.signal(sig)
            async for piece in self.agent_run.stream():
                self.log.add(piece)  # the durable log takes text and items alike (O1, A3)
            result = await self.agent_run.wait()
        except asyncio.CancelledError:
            # Abandoned (a stuck agent after the cancel ladder, or shutdown): still record the end.
            result = AgentResult(ok=False, error="interrupted")
            await self._kill_quietly()
            await asyncio.shield(self._end(on_end, Ending(result, self.log.text)))
            raise
        except Exception as exc:
            log.warning("turn %s: agent failed: %s", self.turn.id, exc)
            result = AgentResult(ok=False, error=f"agent error: {error_text(exc)}")
            await self._kill_quietly()
        self._agent_done = True
        await self._end(on_end, Ending(result, self.log.text))

    async def _end(
        self, on_end: Callable[[TurnRunner, Ending], Awaitable[None]], ending: Ending
    ) -> None:
        # Hazard (order): the flusher's write in flight commits before the end starts, so the
        # end's ``write_rest`` appends after it and ``done`` follows every chunk.
        await self.log.detach()
        await on_end(self, ending)

    async def stop(self, ladder: StopLadder) -> CancelOutcome:
        """The stop ladder: SIGINT, wait; SIGTERM, wait; SIGKILL, wait; then abandon the agent.

        The whole ladder is bounded by ``ladder.bound`` (C4). It never raises: an agent that
        cannot be signalled is abandoned like one that ignores every signal."""
        try:
            async with asyncio.timeout(ladder.bound):
                await self.signal(Signal.INTERRUPT)
                if await self.wait_finished(ladder.interrupt_wait):
                    return CancelOutcome.STOPPED
                log.warning("turn %s ignored the interrupt; escalating", self.turn.id)
                await self.signal(Signal.TERMINATE)
                if await self.wait_finished(ladder.escalation_wait):
                    return CancelOutcome.ESCALATED
                await self.signal(Signal.KILL)
                if await self.wait_finished(ladder.escalation_wait):
                    return CancelOutcome.ESCALATED
        except TimeoutError:
            pass
        except Exception:
            log.exception("stopping turn %s failed", self.turn.id)
        # The agent would not stop: abandon it. The runner task records the turn as ended
        # (CANCELLED, since a reference is held) on its way out.
        log.error("turn %s did not stop; abandoning its agent", self.turn.id)
        self.abandon()
        await self.wait_finished(ladder.escalation_wait)
        return CancelOutcome.TIMED_OUT

    async def signal(self, sig: Signal) -> None:
        self._signals.append(sig)
        if self.agent_run is not None:
            await self.agent_run.signal(sig)

    def abandon(self) -> None:
        """Give up on an agent that ignores every signal: its task records the end and exits.

        Hazard: an agent whose run is already over is not abandoned. Its task is recording
        the end, retried until it commits (Q10); cancelling it would drop the end, leaving the
        session RUNNING with this runner registered for as long as the process lives."""
        if self.task is not None and not self._agent_done:
            self.task.cancel()

    async def wait_finished(self, timeout: float) -> bool:
        try:
            await within(self.finished.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _kill_quietly(self) -> None:
        if self.agent_run is not None and not self.agent_run.done:
            try:
                await self.agent_run.signal(Signal.KILL)
            except Exception:
                log.exception("turn %s: could not kill agent", self.turn.id)
