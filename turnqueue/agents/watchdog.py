"""A9: the activity watchdog of one agent run ("stalls end").

A run's :class:`Watchdog` is told of every sign of life of its agent (:meth:`Watchdog.bump`: an
update, a permission request, output) and of the time a pending approval waits on a person
(:meth:`Watchdog.paused`: the clock stands still meanwhile, a pending approval is no stall).
Once armed (:meth:`Watchdog.arm`: the prompt has reached the agent), the agent has
``Bounds.start`` seconds for its first sign of life and then ``Bounds.stall`` seconds between
two; :meth:`Watchdog.expired` returns when one is exceeded, with the reason.

Hazards:
- A bump is on the output path (one per chunk): it only stores the time, without waking the
  watching task. The watcher sleeps to the deadline it knows and, on waking, compares with the
  last bump, so it wakes at most once per bound while the agent is lively. Only what can move
  the deadline *earlier* (arming, the first sign of life when ``stall < start``, a pause ending)
  wakes it.
- The watcher never acts itself: its owner (the run, :class:`~turnqueue.agents.base.BaseRun`)
  awaits :meth:`expired` in one named task and stops the run through its own kill path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from turnqueue.timeouts import bounded

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
        """A sign of life of the agent."""
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
