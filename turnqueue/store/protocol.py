"""The values the store hands the engine: the locked view of a session, what dead instances
left, and the windows and pages of the keyset listings (G3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from turnqueue.domain import Clarification, QueuePolicy, Session
from turnqueue.fastinit import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class SessionView:
    """What :meth:`Tx.lock` reads under the lock: everything a queue decision needs."""

    session: Session
    policy: QueuePolicy
    clarification: Clarification | None
    queued: int  # visible (not in-flight) entries
    running_turn_id: str | None  # the RUNNING turn, if any
    running_turn_owner: int | None = None  # the instance running it (M4)
    cancel_mark: str | None = None  # the turn an accepted explicit cancel is stopping (Q7)
    #: Q9 holds, kept in rows and committed with the queue revision that shows them (R3)
    cancelling: bool = False  # a cancellation is under way (CANCELLING; C1: ``pending``)
    cancel_revision: int = 0  # the revision of ``cancelling`` (C2)
    transitioning: bool = False  # the task is changing step (WORKFLOW_TRANSITION)
    approval_pending: bool = False  # an approval of the running turn waits (APPROVAL, A6)

    def with_policy(self, policy: QueuePolicy) -> SessionView:
        """This view with ``policy``; on the hot path, so not ``dataclasses.replace``. Hazard: a
        new field must be passed on here too (``tests/store/test_sql_store.py`` checks)."""
        return SessionView(
            self.session,
            policy,
            self.clarification,
            self.queued,
            self.running_turn_id,
            self.running_turn_owner,
            self.cancel_mark,
            self.cancelling,
            self.cancel_revision,
            self.transitioning,
            self.approval_pending,
        )


@dataclass(frozen=True, slots=True)
class Orphans:
    """What instances not among the live ones left (M6), ids by session, entries in queue
    order (see ``store/instances.py``)."""

    turns: dict[str, list[str]]  # RUNNING turns
    entries: dict[str, list[str]]  # in-flight entries
    cancel_marks: dict[str, str]  # Q7: {session: the marked turn} of an owner not live
    holds: set[str]  # sessions held (Q9)
    processes: list[int]  # agent process groups recorded on the host asked about
    #: Sessions left RUNNING with no RUNNING turn, or STARTING for longer than a grace period.
    #: Hazard: STARTING is a normal state while a live instance prepares a new session's agent
    #: (between two transactions of ``createTask``); only one that outlived a lease is stuck.
    stuck: set[str]


K = TypeVar("K")
T = TypeVar("T")

#: Keyset keys of the paged listings (G3): unique, immutable, in listing order.
TaskKey = tuple[datetime, str]  # (created_at, id); tasks are listed newest first
SessionKey = tuple[datetime, str]  # (created_at, id); sessions oldest first
TurnKey = int  # seq, the per-session ordinal; turns oldest first


@dataclass(frozen=True, slots=True)
class Window(Generic[K]):
    """Which part of a listing a page shows: the items strictly between ``after`` and
    ``before`` (either may be absent), then the ``first`` n of them, or the ``last`` n
    (exactly one of the two; the store caps n at 200)."""

    first: int | None = None
    last: int | None = None
    after: K | None = None
    before: K | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[K, T]):
    """A page: its items with their keys, in listing order, and whether the listing has items
    before the first and after the last of them (Relay ``pageInfo``)."""

    items: list[tuple[K, T]]
    has_previous: bool
    has_next: bool

    def values(self) -> list[T]:
        """The items without their keys."""
        return [item for _, item in self.items]
