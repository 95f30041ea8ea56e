"""Engine fixtures: an engine on the shared ``store`` with a hand-driven test agent.

``ManualAgent`` runs turns that end only when the test says so (``run.complete()``,
``run.fail()``), so races are driven by real concurrent tasks and awaited events, never sleeps.
A prompt beginning ``/stubborn`` ignores INTERRUPT; ``/hardy`` ignores INTERRUPT and TERMINATE
(KILL stops it); ``/deaf`` ignores every signal; ``/broken`` raises on every signal;
``/steerable`` takes messages while it runs (Q16: ``steer``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from turnqueue.agents import AgentResult, Signal
from turnqueue.agents.base import steer_item
from turnqueue.bus import EventKind
from turnqueue.domain import Session, Task, TurnItem
from turnqueue.engine import Engine
from turnqueue.timeouts import within

PRINCIPAL = "alice"
WAIT = 10.0


class ManualRun:
    def __init__(self, prompt: str, session_id: str, turn_id: str) -> None:
        self.prompt = prompt
        self.session_id = session_id
        self.turn_id = turn_id
        self.signals: list[Signal] = []
        self.signalled = asyncio.Event()
        self._result: AgentResult | None = None
        self._ended = asyncio.Event()
        self._chunks: asyncio.Queue[str | TurnItem | None] = asyncio.Queue()
        self._chunks.put_nowait(f"echo:{prompt}")
        self.steered: list[str] = []
        #: A test's hook, awaited by :meth:`signal` before the run reacts (it may block).
        self.before_signal: Callable[[Signal], Awaitable[None]] | None = None

    async def steer(self, text: str, entry_id: str) -> bool:
        """Q16: a ``/steerable`` run takes the message while it runs (a STEER item)."""
        if self.done or not self.prompt.startswith("/steerable"):
            return False
        self.steered.append(text)
        self._chunks.put_nowait(steer_item(text, entry_id))
        return True

    async def stream(self) -> AsyncIterator[str | TurnItem]:
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    async def wait(self) -> AgentResult:
        await self._ended.wait()
        assert self._result is not None
        return self._result

    async def signal(self, signal: Signal) -> None:
        self.signals.append(signal)
        self.signalled.set()
        if self.before_signal is not None:
            await self.before_signal(signal)
        if self.prompt.startswith("/broken"):
            raise RuntimeError(f"cannot deliver {signal.name}")
        if self.prompt.startswith("/deaf"):
            return
        if self.prompt.startswith("/hardy") and signal is not Signal.KILL:
            return
        if self.prompt.startswith("/stubborn") and signal is Signal.INTERRUPT:
            return
        self.finish(AgentResult(ok=False, error=f"stopped by {signal.name}"))

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def emit(self, text: str) -> None:
        self._chunks.put_nowait(text)

    def finish(self, result: AgentResult) -> None:
        if not self._ended.is_set():
            self._result = result
            self._chunks.put_nowait(None)
            self._ended.set()

    def complete(self, clarification: str | None = None) -> None:
        self.finish(AgentResult(ok=True, clarification=clarification))

    def fail(self, error: str = "boom") -> None:
        self.finish(AgentResult(ok=False, error=error))


@dataclass
class ManualAgent:
    name: str = "scripted"
    runs: list[ManualRun] = field(default_factory=list)
    started: asyncio.Queue[ManualRun] = field(default_factory=asyncio.Queue)
    fail_start: bool = False
    #: the next this many starts fail (then starts succeed again)
    fail_starts: int = 0
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> ManualRun:
        run = ManualRun(prompt, session_id, turn_id)
        self.runs.append(run)
        if self.fail_start or self.fail_starts:
            self.fail_starts = max(0, self.fail_starts - 1)
            run.fail("cannot start")  # recorded as done, so helpers waiting for it move on
            async with self._changed:
                self._changed.notify_all()
            raise RuntimeError("cannot start")
        self.started.put_nowait(run)
        async with self._changed:
            self._changed.notify_all()
        return run

    async def run_for(self, turn_id: str, timeout: float = WAIT) -> ManualRun:
        """The run of one turn, once the engine has started it."""

        def find() -> ManualRun | None:
            return next((r for r in self.runs if r.turn_id == turn_id), None)

        async with self._changed:
            await within(self._changed.wait_for(find), timeout)
        run = find()
        assert run is not None
        return run

    async def next_run(self, timeout: float = WAIT) -> ManualRun:
        return await within(self.started.get(), timeout)

    def no_new_run(self) -> bool:
        return self.started.empty()

    async def aclose(self) -> None:
        for run in self.runs:
            run.finish(AgentResult(ok=False, error="closed"))


async def new_session(engine: Engine) -> tuple[Task, Session]:
    return await engine.create_task(PRINCIPAL, "a task", None)


async def settle(engine: Engine, session_id: str) -> None:
    """Wait until every ended turn of the session (and the drain its end triggers) has been
    handled: then either nothing runs or a live turn runs whose agent has been started."""
    agent = engine.core.agents["scripted"]
    assert isinstance(agent, ManualAgent)
    while True:
        async with engine.core.session_lock(session_id):
            runner = engine.core.runners.get(session_id)
        if runner is None:
            return
        run = await agent.run_for(runner.turn.id)
        if not run.done:
            return
        await within(runner.finished.wait(), WAIT)


async def next_event(sub: object, kind: EventKind, timeout: float = WAIT) -> object:
    while True:
        event = await within(sub.get(), timeout)  # type: ignore[attr-defined]
        if event.kind is kind:
            return event


async def drive_to_idle(engine: Engine, agent: ManualAgent, session_id: str) -> list[str]:
    """Complete every turn that starts on the session until none runs; return their prompts.

    Waits on the engine's own state (the session lock, the runner's ``finished`` event), so the
    end of each turn and the drain it triggers have been handled before the next look."""
    prompts = []
    while True:
        async with engine.core.session_lock(session_id):
            runner = engine.core.runners.get(session_id)
        if runner is None:
            break
        run = await agent.run_for(runner.turn.id)
        if not run.done:
            prompts.append(run.prompt)
            run.complete()
        await within(runner.finished.wait(), WAIT)
    handled = {id(r) for r in agent.runs}
    while not agent.started.empty():  # forget the starts handled here
        assert id(agent.started.get_nowait()) in handled
    return prompts
