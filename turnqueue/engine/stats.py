"""What the engine tells operators (SPEC U3): the observer it reports to and its counts.

The engine reports to a :class:`Metrics` observer (a no-op, :data:`NULL_METRICS`, unless the app
sets one with ``Engine.observe``) and answers ``Engine.stats()`` / ``Engine.queue_depth()``. It
knows nothing of Prometheus: ``turnqueue.prometheus`` implements the observer and reads these.

Hazard: observer calls are made in the engine's hot paths, sometimes under the session lock: an
implementation must be synchronous, cheap and never raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["NULL_METRICS", "EngineStats", "Metrics", "NullMetrics", "QueueDepth"]


class Metrics(Protocol):
    """What the engine reports. Every call is synchronous, cheap and must not raise."""

    def turn_started(self) -> None: ...

    def turn_ended(self, status: str) -> None: ...

    def reservation(self, kind: str, outcome: str) -> None:
        """``kind``: ``automatic`` or ``targeted`` (Q3); ``outcome``: started/paused/empty/held."""

    def cancel_done(self, outcome: str, seconds: float) -> None: ...


class NullMetrics:
    """The default observer: does nothing."""

    def turn_started(self) -> None:
        pass

    def turn_ended(self, status: str) -> None:
        pass

    def reservation(self, kind: str, outcome: str) -> None:
        pass

    def cancel_done(self, outcome: str, seconds: float) -> None:
        pass


NULL_METRICS = NullMetrics()


@dataclass(frozen=True, slots=True)
class EngineStats:
    """This process's runtime counts, read from memory (no database read)."""

    #: turns running in this process
    running_turns: int
    #: open event subscriptions on this process's bus
    subscriptions: int


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Queue entries over every session, from the database (other instances' included)."""

    #: queued entries, visible to clients
    visible: int
    #: entries reserved and not yet started (Q10)
    in_flight: int
