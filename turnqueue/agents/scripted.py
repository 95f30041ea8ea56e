"""The ``scripted`` agent profile (SPEC §2): deterministic replies for demos and tests.

Every prompt is answered with ``"You said: <prompt>"`` and two fixed sentences, streamed in
:data:`CHUNKS` chunks spread evenly over ``turn_seconds`` (``TURNQUEUE_SCRIPTED_TURN_SECONDS``;
``0`` streams everything at once without sleeping). Special prompts:

- ``/ask <question>`` streams the question and asks it (``ok=True, clarification=<question>``);
- ``/fail`` or ``/fail <reason>`` streams a notice, then fails (``ok=False``, error ``"scripted
  failure"`` or ``"scripted failure: <reason>"``);
- ``/stubborn``, for escalation tests, ignores INTERRUPT (only TERMINATE or KILL stop it) and
  lasts ``max(10 * turn_seconds, 1.0)`` seconds, to outlive a short cancel timeout;
  ``/stubborn!`` ignores TERMINATE too.

Any other signal stops a run promptly (between two chunks) with ``ok=False`` and an error naming
the signal (``"interrupted"``, ``"terminated"``, ``"killed"``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from turnqueue.agents.base import (
    AgentResult,
    BaseRun,
    Bounds,
    RunSet,
    Signal,
    steer_item,
)
from turnqueue.timeouts import bounded

#: How many chunks a reply is streamed in.
CHUNKS = 5
#: How long a ``/stubborn`` turn lasts at least, whatever ``turn_seconds`` is.
STUBBORN_MIN_SECONDS = 1.0
STUBBORN_FACTOR = 10

_STOP_ERRORS = {
    Signal.INTERRUPT: "interrupted",
    Signal.TERMINATE: "terminated",
    Signal.KILL: "killed",
}


@dataclass(frozen=True, slots=True)
class Script:
    """What a scripted run will do, decided from the prompt alone."""

    text: str
    seconds: float
    ignores: frozenset[Signal] = frozenset()
    clarification: str | None = None
    error: str | None = None


def reply_for(prompt: str) -> str:
    """The deterministic reply to an ordinary prompt."""
    return (
        f"You said: {prompt}\n"
        "This is the scripted agent, answering every prompt the same way. "
        "Nothing was done beyond repeating your words."
    )


def plan(prompt: str, turn_seconds: float) -> Script:
    if prompt.startswith("/ask ") or prompt == "/ask":
        question = prompt[len("/ask") :].strip() or "What would you like me to do?"
        return Script(question, turn_seconds, clarification=question)
    if prompt.startswith("/fail"):
        reason = prompt[len("/fail") :].strip()
        error = f"scripted failure: {reason}" if reason else "scripted failure"
        return Script("Failing this turn as asked.\n", turn_seconds, error=error)
    if prompt.startswith("/stubborn"):
        ignores = {Signal.INTERRUPT}
        if prompt.startswith("/stubborn!"):
            ignores.add(Signal.TERMINATE)
        seconds = max(turn_seconds * STUBBORN_FACTOR, STUBBORN_MIN_SECONDS)
        return Script(reply_for(prompt), seconds, ignores=frozenset(ignores))
    return Script(reply_for(prompt), turn_seconds)


def split_chunks(text: str, count: int) -> list[str]:
    """Split ``text`` into at most ``count`` non-empty pieces of about equal length."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class ScriptedRun(BaseRun):
    def __init__(self, script: Script, *, turn_id: str, bounds: Bounds | None = None) -> None:
        super().__init__(f"agent-scripted-{turn_id}", bounds)
        self._script = script
        self._stop: Signal | None = None
        self._stopped = asyncio.Event()

    async def steer(self, text: str, entry_id: str) -> bool:
        """Q16: the scripted agent takes a message while it answers (for demos and tests): it
        shows it as a STEER item and acknowledges it in its reply."""
        if self.done or self._stop is not None:
            return False
        self._emit(steer_item(text, entry_id))
        self._emit(f" (noted: {text}) ")
        return True

    async def signal(self, signal: Signal) -> None:
        if self.done or signal in self._script.ignores:
            return
        # Keep the first signal that stopped it: a later, harsher one changes nothing.
        if self._stop is None:
            self._stop = signal
        self._stopped.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a signal stops the run."""
        if seconds <= 0 or self._stopped.is_set():
            return
        await bounded(self._stopped.wait(), seconds)

    async def _run(self) -> AgentResult:
        script = self._script
        chunks = split_chunks(script.text, CHUNKS)
        interval = script.seconds / len(chunks)
        for chunk in chunks:
            if self._stop is not None:
                break
            self._emit(chunk)
            await self._pause(interval)
        if self._stop is not None:
            return AgentResult(ok=False, error=_STOP_ERRORS[self._stop])
        if script.error is not None:
            return AgentResult(ok=False, error=script.error)
        return AgentResult(ok=True, clarification=script.clarification)


class ScriptedAgent:
    """The ``scripted`` profile. Holds no resources but its live runs."""

    name = "scripted"

    def __init__(self, turn_seconds: float, *, bounds: Bounds | None = None) -> None:
        self.turn_seconds = turn_seconds
        self.bounds = bounds  # A9: None, unbounded
        self._runs = RunSet()

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> ScriptedRun:
        run = ScriptedRun(plan(prompt, self.turn_seconds), turn_id=turn_id, bounds=self.bounds)
        return self._runs.launch(run)

    async def aclose(self) -> None:
        await self._runs.aclose()
