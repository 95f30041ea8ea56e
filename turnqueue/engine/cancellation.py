"""The cancellation-pending projection (C1, C2, C5, C7, R2).

Each session has a runtime reference count of accepted cancellation operations of every kind. The
first reference sets ``pending``, the last clears it, and each of those two transitions — and only
those — increases the session's cancellation revision.

Revisions start at ``epoch << 32``. The epoch comes from a durable database sequence at process
start (R2), so every revision this process issues is larger than every revision any earlier
process issued. A process that knows nothing of a session answers ``(False, 0)``, which can never
outrank a real transition; a process that is not the owner relays what it heard (C7, ``relay``).
When a process recovers a session whose owner died (M6), it ``adopt``s it with a fresh epoch and
publishes ``(False, epoch << 32)``, which outranks whatever the dead owner said, so no client keeps
a stale ``pending: true``.

R2 across instances: a session's turns can be owned by different instances over time, and an
older instance (a smaller epoch) may own a later turn. Its revisions must still exceed every
revision any instance published for the session, so each transition continues above the
session's *floor*: the highest revision known to have been published (or reserved) for it by
anyone. The floor has two sources:

- what this process heard (``relay``), which suffices while its LISTEN connection is up;
- a durable high-water mark on the session's lock row (``raise_floor``), which covers what it
  did not hear (it was down, or its LISTEN was cut). Every transaction that changes a session's
  queue status writes ``floor_hint`` there and reads the stored value back (``Core.bump_queue``).
  While a reference is held the hint *reserves* the release's revision too (``revision + 1``):
  the owner's turn-end transaction writes it before the end commits, and the next owner's turn
  start reads it under the same lock row after that commit, so even a release published after
  the next turn started elsewhere stays below what the next owner issues.

C7 for relays: a relaying process that may have missed a transition must not keep answering
what it relayed. ``relayed_pending`` lists what to ask the owners again after a LISTEN outage
(``engine.cluster``); ``forget`` drops a relayed value its owner no longer confirms;
``relayed_from`` names those of owners that died, which recovery adopts (M6). A relayed value
never holds a queue: the CANCELLING hold is a row (``session_holds``) every instance reads.

Hazard: count, revision and the publication happen in one synchronous critical section (no
``await`` inside), so transitions are published in the order they happened, and a snapshot
(``status``) reads the flag and its revision together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from turnqueue.domain import CancelKind, CancellationStatus

MAX_REVISION = 2**53 - 1
COUNTER_BITS = 32


@dataclass(slots=True)
class _Entry:
    #: the last revision this process issued for the session (its epoch's base before any)
    revision: int
    count: int = 0


@dataclass(frozen=True, slots=True)
class _Relayed:
    status: CancellationStatus
    origin: int  # the instance that published it (0: unknown)


class CancellationRegistry:
    def __init__(self, epoch: int, on_transition: Callable[[CancellationStatus], None]) -> None:
        if not 0 < epoch < 2 ** (53 - COUNTER_BITS):
            raise ValueError(f"epoch {epoch} out of range")
        self._epoch = epoch
        self._base = epoch << COUNTER_BITS
        self._entries: dict[str, _Entry] = {}
        self._relayed: dict[str, _Relayed] = {}
        #: R2: the highest revision published (or reserved) for a session by another process
        self._floor: dict[str, int] = {}
        self._on_transition = on_transition

    @property
    def epoch(self) -> int:
        return self._epoch

    # -- reading --------------------------------------------------------------------------------
    def status(self, session_id: str) -> CancellationStatus:
        entry = self._entries.get(session_id)
        relayed = self._relayed.get(session_id)
        if entry is not None:
            local = CancellationStatus(session_id, entry.count > 0, entry.revision)
            # After a turn of ours, the session may have moved to another owner: the newest wins.
            if relayed is None or entry.count > 0 or local.revision >= relayed.status.revision:
                return local
        if relayed is not None:
            return relayed.status
        return CancellationStatus(session_id, False, 0)

    def pending(self, session_id: str) -> bool:
        """Whether a cancellation is under way, here or (as relayed) at the owner."""
        return self.status(session_id).pending

    def own(self, session_id: str) -> CancellationStatus | None:
        """This process's own projection of the session (never a relayed one), if any."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        return CancellationStatus(session_id, entry.count > 0, entry.revision)

    def own_pending(self) -> list[CancellationStatus]:
        """Every session with a cancellation of this process under way (C7: asked by others)."""
        return [
            CancellationStatus(sid, True, e.revision) for sid, e in self._entries.items() if e.count
        ]

    # -- R2: the floor ----------------------------------------------------------------------------
    def floor_hint(self, session_id: str) -> int:
        """The highest revision known for the session, including one reserved for the release
        of a reference held here: what the durable high-water mark must be at least."""
        hint = self._floor.get(session_id, 0)
        entry = self._entries.get(session_id)
        if entry is not None:
            hint = max(hint, entry.revision + (1 if entry.count else 0))
        return hint

    def raise_floor(self, session_id: str, floor: int) -> None:
        """The durable high-water mark read back from the store: continue above it."""
        if floor > self.floor_hint(session_id):  # not merely what this process wrote itself
            self._floor[session_id] = floor

    # -- relaying (C7) ----------------------------------------------------------------------------
    def relay(self, status: CancellationStatus, origin: int = 0) -> None:
        """Remember a transition published by the owning process (C7); never invent one."""
        sid = status.session_id
        if status.revision > self._floor.get(sid, 0):
            self._floor[sid] = status.revision
        current = self._relayed.get(sid)
        if current is None or status.revision > current.status.revision:
            self._relayed[sid] = _Relayed(status, origin)

    def relayed_pending(self) -> dict[str, int]:
        """Relayed sessions answered as pending, with the instance that said so."""
        return {sid: r.origin for sid, r in self._relayed.items() if r.status.pending}

    def forget(self, session_id: str) -> None:
        """Drop what was relayed for the session (its owner cannot confirm it: C7). The floor
        stays (R2)."""
        self._relayed.pop(session_id, None)

    def relayed_from(self, dead: Iterable[int]) -> list[str]:
        """Sessions answered ``pending`` as relayed from a publisher that died (C5, C7): recovery
        adopts them (``adopt``), which clears them above what the dead owner said."""
        gone = set(dead)
        return sorted(sid for sid, origin in self.relayed_pending().items() if origin in gone)

    # -- owning -----------------------------------------------------------------------------------
    def adopt(self, session_id: str, epoch: int) -> CancellationStatus | None:
        """A recovered session (M6): clear it with a revision above anything said before. The
        caller publishes the status returned once the recovery that adopted it has committed
        (None: a live cancellation of ours, which clears itself)."""
        entry = self._entries.get(session_id)
        if entry is not None and entry.count > 0:
            return None
        base = max(epoch << COUNTER_BITS, self._floor.get(session_id, 0))
        entry = self._entries[session_id] = _Entry(revision=base)
        self._relayed.pop(session_id, None)
        return CancellationStatus(session_id, False, entry.revision)

    def announce(self, status: CancellationStatus) -> None:
        """Publish an adopted status (``adopt``) unless a newer transition came meanwhile."""
        if self.status(status.session_id).revision == status.revision:
            self._on_transition(status)

    @contextmanager
    def reference(self, session_id: str, kind: CancelKind) -> Iterator[None]:
        """Hold one reference for the duration of the block; released on every exit (C5).

        ``kind`` names the C5 reference at the call site; only the count is kept."""
        self._acquire(session_id)
        try:
            yield
        finally:
            self._release(session_id)

    def _acquire(self, session_id: str) -> None:
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = _Entry(revision=self._base)
        entry.count += 1
        if entry.count == 1:
            self._transition(session_id, entry)

    def _release(self, session_id: str) -> None:
        entry = self._entries[session_id]
        entry.count -= 1
        if entry.count == 0:
            self._transition(session_id, entry)

    def _transition(self, session_id: str, entry: _Entry) -> None:
        # R2: above our own last revision and above anything anyone published for the session.
        revision = max(entry.revision, self._floor.get(session_id, 0)) + 1
        if revision > MAX_REVISION:
            raise OverflowError("cancellation revisions exhausted")
        entry.revision = revision
        self._on_transition(CancellationStatus(session_id, entry.count > 0, revision))
