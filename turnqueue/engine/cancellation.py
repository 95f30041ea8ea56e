"""The cancellation-pending projection (C1, C2, C7, R2).

Each session has a runtime reference count of accepted cancellation operations of every kind. The
first reference sets ``pending``, the last clears it, and each of those two transitions — and only
those — increases the session's cancellation revision.

Revisions are ``epoch << 32 | counter``. The epoch comes from a durable database sequence at
process start (R2), so every revision this process issues is larger than every revision any earlier
process issued. A process that knows nothing of a session answers ``(False, 0)``, which can never
outrank a real transition; a process that is not the owner relays what it heard (C7, ``relay``).
When a process recovers a session whose owner died (M6), it ``adopt``s it with a fresh epoch and
publishes ``(False, epoch << 32)``, which outranks whatever the dead owner said, so no client keeps
a stale ``pending: true``.

Hazard: count, revision and the publication happen in one synchronous critical section (no
``await`` inside), so transitions are published in the order they happened, and a snapshot
(``status``) reads the flag and its revision together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from turnqueue.domain import CancelKind, CancellationStatus

MAX_REVISION = 2**53 - 1
COUNTER_BITS = 32


@dataclass(slots=True)
class _Entry:
    base: int
    count: int = 0
    counter: int = 0
    kinds: list[CancelKind] | None = None


class CancellationRegistry:
    def __init__(self, epoch: int, on_transition: Callable[[CancellationStatus], None]) -> None:
        if not 0 < epoch < 2 ** (53 - COUNTER_BITS):
            raise ValueError(f"epoch {epoch} out of range")
        self._epoch = epoch
        self._base = epoch << COUNTER_BITS
        self._entries: dict[str, _Entry] = {}
        self._relayed: dict[str, CancellationStatus] = {}
        self._on_transition = on_transition

    @property
    def epoch(self) -> int:
        return self._epoch

    def status(self, session_id: str) -> CancellationStatus:
        entry = self._entries.get(session_id)
        relayed = self._relayed.get(session_id)
        if entry is not None:
            local = CancellationStatus(session_id, entry.count > 0, entry.base + entry.counter)
            # After a turn of ours, the session may have moved to another owner: the newest wins.
            if relayed is None or entry.count > 0 or local.revision >= relayed.revision:
                return local
        if relayed is not None:
            return relayed
        return CancellationStatus(session_id, False, 0)

    def pending(self, session_id: str) -> bool:
        """Whether a cancellation is under way, here or (as relayed) at the owner."""
        return self.status(session_id).pending

    def adopt(self, session_id: str, epoch: int) -> None:
        """A recovered session (M6): clear it with a revision above anything said before."""
        entry = self._entries.get(session_id)
        if entry is not None and entry.count > 0:
            return  # a live cancellation of ours: it clears itself
        entry = self._entries[session_id] = _Entry(base=epoch << COUNTER_BITS)
        self._relayed.pop(session_id, None)
        self._on_transition(CancellationStatus(session_id, False, entry.base))

    def kinds(self, session_id: str) -> tuple[CancelKind, ...]:
        entry = self._entries.get(session_id)
        return tuple(entry.kinds or ()) if entry else ()

    @contextmanager
    def reference(self, session_id: str, kind: CancelKind) -> Iterator[None]:
        """Hold one reference for the duration of the block; released on every exit (C5)."""
        self._acquire(session_id, kind)
        try:
            yield
        finally:
            self._release(session_id, kind)

    def relay(self, status: CancellationStatus) -> None:
        """Remember a transition published by the owning process (C7); never invent one."""
        current = self._relayed.get(status.session_id)
        if current is None or status.revision > current.revision:
            self._relayed[status.session_id] = status

    def _acquire(self, session_id: str, kind: CancelKind) -> None:
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = _Entry(base=self._base)
        entry.kinds = [*(entry.kinds or ()), kind]
        entry.count += 1
        if entry.count == 1:
            self._transition(session_id, entry)

    def _release(self, session_id: str, kind: CancelKind) -> None:
        entry = self._entries[session_id]
        if entry.kinds and kind in entry.kinds:
            entry.kinds.remove(kind)
        entry.count -= 1
        if entry.count == 0:
            self._transition(session_id, entry)

    def _transition(self, session_id: str, entry: _Entry) -> None:
        entry.counter += 1
        if entry.counter >= 2**COUNTER_BITS:
            raise OverflowError("cancellation counter exhausted for this epoch")
        self._on_transition(
            CancellationStatus(session_id, entry.count > 0, entry.base + entry.counter)
        )
