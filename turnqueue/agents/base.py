"""The one narrow interface between the engine and an agent (SPEC §2), and shared plumbing.

An :class:`Agent` starts one :class:`AgentRun` per turn. The engine reads ``stream()``, then
``wait()`` for the :class:`AgentResult`. To stop a turn it calls ``signal()`` with INTERRUPT, then
TERMINATE, then KILL; the ladder's *timing* is the engine's, an agent only delivers the signals.
A signalled run still ends through ``wait()``; the engine decides that the turn is CANCELLED.

:class:`BaseRun` is the stream/wait/done half of every profile's run: a subclass supplies
``_run()`` (chunks through ``_emit``, then the result) and ``signal()``. Each run is one named
task (awaiting any helper task it makes), and ``wait()`` awaits it, so once ``wait()`` returns
nothing of the run is left on the event loop. :class:`RunSet` kills an agent's runs on ``aclose()``.

A9: a run given :class:`Bounds` has a :class:`Watchdog`. Once armed (the prompt reached the
agent), the agent has ``Bounds.start`` seconds for its first sign of life (:meth:`Watchdog.bump`:
every chunk and item emitted, and whatever a subclass bumps), then ``Bounds.stall`` between two;
the clock stands still while an approval waits on a person (:meth:`Watchdog.paused`). A run
silent past a bound is killed through its own ``signal(KILL)`` and fails STALLED, whatever the
kill made of its result; its task is cancelled if it has not ended :data:`CLOSE_GRACE_SECONDS`
after the kill.

Hazard: a bump is on the output path (one per chunk), so it only stores the time. The watcher
sleeps to the deadline it knows and compares with the last bump on waking (at most one wake per
bound while the agent is lively); only what moves the deadline *earlier* (arming, the first sign
of life when ``stall < start``, a pause ending) wakes it.
"""

from __future__ import annotations

import asyncio
import logging
import signal as posix_signal
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, TypeVar, runtime_checkable

from turnqueue.domain import AgentErrorKind, ItemKind, TurnItem
from turnqueue.errors import TurnqueueError
from turnqueue.timeouts import bounded

log = logging.getLogger(__name__)
R = TypeVar("R", bound="BaseRun")

#: How long ``aclose`` waits for a killed run to wind down before cancelling its task.
CLOSE_GRACE_SECONDS = 2.0
#: A9: a profile's ``stall_timeout`` by default (seconds; ``TURNQUEUE_STALL_TIMEOUT``).
DEFAULT_STALL_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Bounds:
    """How long an agent may stay silent: ``start`` to its first sign of life after the
    prompt, ``stall`` between two (A9)."""

    start: float
    stall: float


class Watchdog:
    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._loop = asyncio.get_running_loop()
        self._armed = False
        self._active = False  # a sign of life since arming
        self._paused = 0
        self._last = self._loop.time()
        self._wake = asyncio.Event()

    def arm(self) -> None:
        """The prompt has reached the agent: its clock starts now, for its first sign of life."""
        self._armed = True
        self._active = False
        self._last = self._loop.time()
        self._wake.set()

    def bump(self) -> None:
        self._last = self._loop.time()
        if not self._active:
            self._active = True
            self._wake.set()  # the bound may shrink from ``start`` to ``stall``

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While a person is asked (a pending approval): no stall. Asking and being answered
        are both signs of life."""
        self.bump()
        self._paused += 1
        self._wake.set()
        try:
            yield
        finally:
            self._paused -= 1
            self.bump()
            self._wake.set()

    async def expired(self) -> str:
        """Return (with the reason) once a bound is exceeded; never while paused or unarmed."""
        while True:
            self._wake.clear()
            if not self._armed or self._paused:
                await self._wake.wait()
                continue
            bound = self.bounds.stall if self._active else self.bounds.start
            left = self._last + bound - self._loop.time()
            if left <= 0:
                if self._active:
                    return f"stalled: no agent activity for {bound:g} s"
                return f"stalled: the agent showed no activity within {bound:g} s of the prompt"
            # ``bounded``, not wait_for: a cancel arriving as the event is set (the run ending
            # right after a bump) must end the watcher (turnqueue.timeouts).
            await bounded(self._wake.wait(), left)


class Signal(IntEnum):
    """The stop ladder, mildest first: SIGINT, SIGTERM, SIGKILL for a process."""

    INTERRUPT = 1
    TERMINATE = 2
    KILL = 3


#: The stop ladder as process-group signals (a ``command`` turn's; an ``acp`` turn's INTERRUPT is
#: ``session/cancel``, its TERMINATE and KILL these).
POSIX_SIGNALS = {
    Signal.INTERRUPT: posix_signal.SIGINT,
    Signal.TERMINATE: posix_signal.SIGTERM,
    Signal.KILL: posix_signal.SIGKILL,
}


@dataclass(frozen=True, slots=True)
class AgentResult:
    ok: bool  # the turn completed; False: it failed (or was stopped)
    error: str | None = None  # why it failed
    clarification: str | None = None  # the agent's question: the turn completes with it
    error_kind: AgentErrorKind | None = None  # A11; None when not an agent's error or exit
    stderr: str | None = None  # the tail of the agent's stderr in the turn, apart from ``error``


class AgentStartError(TurnqueueError):
    """The agent could not start (a session's agent, or a turn's); the turn ends FAILED. Its
    ``stderr`` (what the agent wrote meanwhile) is never part of the message (A11)."""

    def __init__(
        self, message: str, *, kind: AgentErrorKind | None = None, stderr: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.stderr = stderr or None


@contextmanager
def spawn_errors(program: str) -> Iterator[None]:
    """The OS's refusal to start ``program`` as :class:`AgentStartError` (every profile's words)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise AgentStartError(f"agent command not found: {program}") from exc
    except PermissionError as exc:
        raise AgentStartError(f"agent command is not executable: {program}") from exc
    except OSError as exc:
        raise AgentStartError(f"cannot start agent command {program}: {exc}") from exc


def error_text(exc: BaseException) -> str:
    """An exception's message, or its type's name when it has none (a bare assert)."""
    return str(exc) or type(exc).__name__


def current_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@runtime_checkable
class AgentRun(Protocol):
    """One running turn."""

    def stream(self) -> AsyncIterator[str | TurnItem]:
        """Output as produced: ``str`` for the agent's message text, :class:`TurnItem` for
        structured output (A3: thoughts, tool calls, plans, raw updates). Ends when the turn's
        output ends. One consumer only."""

    async def wait(self) -> AgentResult:
        """Resolve when the turn is over (after the stream's end)."""

    async def signal(self, signal: Signal) -> None:
        """Ask the run to stop. Idempotent; a no-op once the run has ended."""

    @property
    def done(self) -> bool: ...


@runtime_checkable
class Steerable(Protocol):
    """A run that can take a message while it works (Q16: steering). ``steer`` answers whether
    the agent took it; a run that took it also streams it as a STEER item of its turn."""

    async def steer(self, text: str, entry_id: str) -> bool: ...


def steer_item(text: str, entry_id: str) -> TurnItem:
    """Q16: the item a steered message becomes in the turn it was steered into."""
    return TurnItem(ItemKind.STEER, {"text": text, "entryId": entry_id})


class ProcessLog(Protocol):
    """Where an agent records each process group it runs until it is gone (M6: recovery kills
    what a dead server left), set by the engine as its ``processes``. Neither call raises."""

    async def started(self, session_id: str, pgid: int) -> None: ...

    async def ended(self, pgid: int) -> None: ...


@runtime_checkable
class Agent(Protocol):
    name: str

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> AgentRun:
        """Start a turn. Raises (:class:`AgentStartError`) when the agent cannot start."""

    async def aclose(self) -> None:
        """Kill whatever the agent still runs (server shutdown). Further ``start`` calls raise."""


class BaseRun(ABC):
    """Stream/wait/done for a run whose work is one background task, ``_run``."""

    #: False: the subclass arms the watchdog itself, once the prompt has reached its agent.
    ARMS_ON_LAUNCH = True

    def __init__(self, task_name: str, bounds: Bounds | None = None) -> None:
        # Unbounded on purpose: the producer must never block on a slow (or absent) reader, or a
        # child process would block on a full pipe and never exit. Each chunk is bounded in size.
        self._chunks: asyncio.Queue[str | TurnItem | None] = asyncio.Queue()
        self._streamed = False
        self._ended = False
        self._task_name = task_name
        self._task: asyncio.Task[AgentResult] | None = None
        self._bounds = bounds
        self.watchdog: Watchdog | None = None
        self.stalled: str | None = None  # A9: why the run was killed as stalled

    def launch(self) -> None:
        """Start the background task; called by the agent once the run is set up."""
        if self._bounds is not None:
            self.watchdog = Watchdog(self._bounds)
            if self.ARMS_ON_LAUNCH:
                self.watchdog.arm()
        self._task = asyncio.create_task(self._main(), name=self._task_name)

    @property
    def task(self) -> asyncio.Task[AgentResult]:
        if self._task is None:
            raise RuntimeError("run not launched")
        return self._task

    @abstractmethod
    async def _run(self) -> AgentResult:
        """Produce the turn's output with :meth:`_emit` and return its result."""

    @abstractmethod
    async def signal(self, signal: Signal) -> None: ...

    def _emit(self, chunk: str | TurnItem) -> None:
        """Stream a text chunk (an empty one is none) or an item."""
        if chunk and not self._ended:  # a late callback after the end is dropped
            self._bump()
            self._chunks.put_nowait(chunk)

    def _bump(self) -> None:
        if self.watchdog is not None:
            self.watchdog.bump()

    async def _main(self) -> AgentResult:
        watch: asyncio.Task[None] | None = None
        if self.watchdog is not None:
            watch = asyncio.create_task(self._watch(self.watchdog), name=f"stall-{self._task_name}")
        try:
            result = await self._run()
        except Exception as exc:  # a bug or an OS failure: the turn fails, the server goes on
            log.exception("agent run %s failed", self._task_name)
            result = AgentResult(ok=False, error=f"agent error: {error_text(exc)}")
        finally:
            # Always end the stream, also on cancellation, so a reader never hangs.
            self._ended = True
            self._chunks.put_nowait(None)
            if watch is not None:  # the watcher is this task's: it never outlives the run
                watch.cancel()
                await asyncio.wait({watch})
        return self._stall_result(result.stderr) if self.stalled is not None else result

    def _stall_result(self, stderr: str | None = None) -> AgentResult:
        return AgentResult(
            ok=False, error=self.stalled, error_kind=AgentErrorKind.STALLED, stderr=stderr
        )

    async def _watch(self, watchdog: Watchdog) -> None:
        """A9: kill the run once its agent has been silent past a bound."""
        reason = await watchdog.expired()
        self.stalled = reason
        log.warning("agent run %s: %s; killing it", self._task_name, reason)
        await self.signal(Signal.KILL)
        _, pending = await asyncio.wait({self.task}, timeout=CLOSE_GRACE_SECONDS)
        if pending:
            log.error("agent run %s did not end after its kill; abandoning it", self._task_name)
            self.task.cancel()

    async def stream(self) -> AsyncIterator[str | TurnItem]:
        if self._streamed:
            raise RuntimeError("stream() may be consumed only once per run")
        self._streamed = True
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    async def wait(self) -> AgentResult:
        task = self.task
        try:
            # Shielded: a caller that gives up waiting must not cancel the run itself.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and not current_cancelling():
                if self.stalled is not None:
                    return self._stall_result()
                return AgentResult(ok=False, error="agent closed")
            raise

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()


class RunSet:
    """The live runs of one agent, so that ``aclose`` can kill them and await their tasks."""

    def __init__(self) -> None:
        self._runs: set[BaseRun] = set()
        self.closed = False

    def launch(self, run: R) -> R:
        """Launch ``run`` as one of these; :class:`AgentStartError` once closed."""
        if self.closed:
            raise AgentStartError("agent is closed")
        run.launch()
        self.add(run)
        return run

    def add(self, run: BaseRun) -> None:
        self._runs.add(run)
        run.task.add_done_callback(lambda _t: self._runs.discard(run))

    async def aclose(self) -> None:
        self.closed = True
        runs = list(self._runs)
        for run in runs:
            await run.signal(Signal.KILL)
        tasks = [run.task for run in runs]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_GRACE_SECONDS)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
