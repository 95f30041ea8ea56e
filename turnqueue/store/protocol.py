"""The narrow async interface between the engine and the database.

The caller owns the transaction::

    async with store.transaction() as tx:
        view = await tx.lock(session_id)       # the session's lock row first (Q3)
        entry = await tx.reserve_head(session_id)
        ...
    # committed here; ``tx.after_commit`` callbacks have run

Store methods never commit by themselves. An exception inside the block rolls everything back and
no ``after_commit`` callback runs, which is how "events are published only after their transaction
commits" is kept: the engine registers its publications with ``tx.after_commit``.

Serialisation (Q3): every write of the policy and every reservation calls :meth:`Tx.lock` first. On
PostgreSQL that is ``SELECT … FOR UPDATE`` on ``queue_session_locks``; on SQLite every write
transaction is ``BEGIN IMMEDIATE`` behind one in-process writer lock, so the database has a single
writer and ``lock`` only reads.

Revisions (R1): methods that change a session's state, turns or clarification bump the session's
revision themselves. A queue gets one new revision per transaction that changed its status,
however many writes did (Q13): see :meth:`UnitOfWork.changed_queues` and :meth:`Tx.bump_queue`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from turnqueue.domain import (
    AgentConversation,
    AgentErrorKind,
    Approval,
    ApprovalOutcome,
    Clarification,
    HoldReason,
    MessageSource,
    OutputRecord,
    OwnerRequest,
    PauseReason,
    QueueEntry,
    QueuePolicy,
    RequestState,
    SentMessage,
    Session,
    SessionState,
    SteerRequest,
    Task,
    Turn,
    TurnStatus,
)
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
    #: Q9 holds kept in rows (``session_holds``, the approvals): committed with the queue
    #: revision that shows them, so every read of one revision agrees (R3)
    cancelling: bool = False  # a cancellation is under way (CANCELLING; C1: ``pending``)
    cancel_revision: int = 0  # the revision of ``cancelling`` (C2)
    transitioning: bool = False  # the task is changing step (WORKFLOW_TRANSITION)
    approval_pending: bool = False  # an approval of the running turn waits (APPROVAL, A6)

    def with_policy(self, policy: QueuePolicy) -> SessionView:
        """This view with ``policy`` (what a rule's own policy write made of it). Hot path
        (P4): several times cheaper than ``dataclasses.replace``. Hazard: a new field must be
        passed on here too (``tests/store/test_sql_store.py`` checks every field is)."""
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
    """What instances not among the live ones left (M6): an owner that is NULL (written before
    ownership existed) counts as not live. Ids by session, entries in queue order."""

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


class Listener(Protocol):
    """Hears the notifications of every instance (``Tx.notify``, ``Store.notify``)."""

    #: How often the connection was lost and re-established.
    reconnects: int

    async def start(self) -> None:
        """Connect and listen; returns once the first listen is in place."""

    async def aclose(self) -> None: ...


class UnitOfWork(Protocol):
    """What every transaction offers beside its reads and writes: its commit's consequences."""

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (sync, or returning an awaitable that is awaited) after COMMIT."""

    def notify(self, payload: str) -> None:
        """Deliver ``payload`` to every instance's listener if and when this commits (M4)."""

    def changed_queues(self) -> list[str]:
        """Sessions whose queue status (entries, policy, state, clarification, approvals,
        holds) this transaction changed, in the order it first changed them. Each gets a new
        queue revision before COMMIT (Q13): the unit of work bumps it, or the store does."""


class InstancesTx(Protocol):
    """The live instances and what a dead one left (M4, M6); the epoch sequence (R2)."""

    async def register_instance(self, instance: int) -> None: ...

    async def unregister_instance(self, instance: int) -> None: ...

    async def heartbeat(self, instance: int, lease_seconds: float) -> bool:
        """Refresh this instance's lease; False when its row is gone (declared dead)."""

    async def live_instances(self, lease_seconds: float) -> set[int]: ...

    async def orphans(self, live: Iterable[int], *, host: str, grace: float) -> Orphans:
        """What instances not in ``live`` left (M6): their processes on ``host``; the stuck
        sessions of :attr:`Orphans.stuck`, a STARTING one after ``grace`` seconds."""

    async def drop_orphaned_holds(self, session_id: str, live: Iterable[int]) -> int:
        """Delete the session's holds of instances not in ``live``; how many rows."""

    async def eligible_sessions(self) -> list[str]:
        """Sessions whose queue may run now by the durable rules (promptable, no clarification,
        auto-run not OFF, a visible entry): the start-up sweep drains them (Q9/M6)."""

    async def record_process(
        self, host: str, pgid: int, instance: int, session_id: str | None
    ) -> None:
        """An agent process group ``instance`` runs on ``host`` (M6 kills it after a crash)."""

    async def forget_process(self, host: str, pgid: int) -> None: ...

    async def process_owners(self, session_id: str) -> set[int]:
        """The instances that run an agent process of the session (A8: where to close it)."""

    async def next_epoch(self) -> int:
        """A new value of the durable epoch sequence: larger than every earlier one."""


class SessionsTx(Protocol):
    """Tasks, sessions, their turns and clarifications (R1: a change bumps the revision)."""

    async def create_task(self, *, title: str, owner: str, workflow_step: str) -> Task: ...

    async def set_task_step(self, task_id: str, step: str, current_session_id: str) -> Task: ...

    async def create_session(self, *, task_id: str, agent: str, state: SessionState) -> Session:
        """Insert the session (revision 1) and its ``queue_session_locks`` row (queue revision 0).

        Also points the task's ``current_session_id`` at it. No policy row: auto-run reads true.
        """

    async def get_task(self, task_id: str) -> Task | None: ...

    async def get_session(self, session_id: str) -> Session | None: ...

    async def set_session_state(self, session_id: str, state: SessionState) -> Session:
        """Set the state, bump the session revision and ``updated_at``."""

    async def set_complete_on_idle(self, session_id: str, complete: bool) -> None:
        """Whether the session becomes COMPLETED (not WAITING_FOR_INPUT) when its running turn
        ends: its task reached the workflow's last step while the turn ran. The end clears it."""

    async def touch_starting(self, session_id: str) -> None:
        """Refresh a STARTING session's ``updated_at`` while its agent starts (A2), so recovery
        does not take it for one a dead instance left STARTING."""

    async def bump_session(self, session_id: str) -> int:
        """A new session revision and ``updated_at``, the state unchanged; the revision (A6)."""

    async def lock(self, session_id: str) -> SessionView:
        """Take the session's lock row (Q3) and read its view. ``KeyError`` if it does not exist."""

    async def view(self, session_id: str) -> SessionView | None:
        """The same view without taking the lock (reads, snapshots)."""

    async def start_turn(
        self,
        session_id: str,
        *,
        prompt: str,
        source: MessageSource,
        consume: Sequence[str] = (),
        owner: int | None = None,
        client_message_id: str | None = None,
        entry_id: str | None = None,
    ) -> Turn:
        """Insert a RUNNING turn, make the session RUNNING (revision +1) and, in the same
        statement batch, delete the in-flight entries named in ``consume`` (Q10). The turn
        carries the key of the send it came from (Q15) and the entry it started from (Q16)."""

    async def end_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        output: str,
        error: str | None,
        session_state: SessionState,
        error_kind: AgentErrorKind | None = None,
        agent_stderr: str | None = None,
    ) -> tuple[Turn, Session]:
        """End a RUNNING turn and set its session's state (revision +1). A turn that is no
        longer RUNNING is left as it is and returned unchanged (idempotent end). A11: its
        failure's classification and its agent's stderr are kept with it."""

    async def get_turn(self, turn_id: str) -> Turn | None: ...

    async def turn_started_from(self, session_id: str, entry_id: str) -> Turn | None:
        """Q16: the session's turn started from this queue entry, if one was."""

    async def set_clarification(
        self, session_id: str, *, turn_id: str | None, question: str
    ) -> Clarification:
        """Replace the session's pending clarification; bumps the session revision."""

    async def clear_clarification(self, session_id: str) -> Clarification | None:
        """Remove and return the pending clarification (None if none); bumps the session
        revision only when there was one."""


class OutputTx(Protocol):
    """The turn output log (O1)."""

    async def append_output(
        self, batches: Mapping[str, Sequence[OutputRecord]], *, running: bool = False
    ) -> set[str]:
        """Append each turn's records to its log, all in one statement, while the turn is
        RUNNING (its row is taken). Returns the turns whose records were refused, nothing
        written, because the turn had ended: an ended turn's log never changes.

        ``running``: the caller holds the lock row of each turn's session and read the turn
        RUNNING under it in this transaction (a turn's end): no check is made, nothing is
        refused. Hazard: the records may then be written only at COMMIT (PostgreSQL), so a
        later read in this transaction need not see them."""

    async def read_output(self, turn_id: str, after_offset: int = 0) -> list[OutputRecord]:
        """The turn's MESSAGE records that end after ``after_offset`` characters, in order."""

    async def read_records(self, turn_id: str, after_seq: int = -1) -> list[OutputRecord]:
        """Every record of the turn's log after ``after_seq``, in order (text and items: A3)."""

    async def output_text(self, turn_id: str) -> str:
        """The turn's output text as its log holds it (what a recovered turn keeps, M6)."""


class ApprovalsTx(Protocol):
    """Approvals of a running turn (A6, turnqueue/store/approvals.py)."""

    async def add_approval(self, approval: Approval) -> None: ...

    async def answer_approval(
        self,
        approval_id: str,
        *,
        outcome: ApprovalOutcome,
        option_id: str | None,
        answered_by: str | None,
        at: datetime,
    ) -> bool:
        """Answer a PENDING approval; False when it was already answered or does not exist
        (exactly once)."""

    async def settle_approvals(self, turn_id: str, *, answered_by: str, at: datetime) -> int:
        """Answer every PENDING approval of the turn CANCELLED (its turn ended, M6); how many."""

    async def get_approval(self, approval_id: str) -> Approval | None: ...

    async def approvals_of_turn(self, turn_id: str) -> list[Approval]: ...


class QueueTx(Protocol):
    """A session's queue: its policy (Q1, Q14), revision (Q13), holds (Q9) and entries."""

    async def set_policy(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> None:
        """Upsert the ``queue_session_state`` row."""

    async def set_policy_bumped(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> int:
        """:meth:`set_policy`, then :meth:`bump_queue`; the queue revision. One statement
        where the dialect can (PostgreSQL), and when the revision was not bumped yet."""

    async def delete_policy(self, session_id: str) -> None:
        """Remove the policy row (W3); the session then reads auto-run true again."""

    async def bump_queue(self, session_id: str) -> int:
        """Increment the durable queue revision kept on the lock row (never deleted), once per
        transaction: a second call in the same transaction returns the same revision."""

    async def bump_cancellation(self, session_id: str) -> int:
        """Increment the session's durable cancellation revision (C2); the new revision."""

    async def set_cancel_mark(self, session_id: str, turn_id: str | None) -> None:
        """Record (or clear, with None) the turn an accepted explicit cancel stops (Q7)."""

    async def change_hold(
        self, session_id: str, instance: int, kind: HoldReason, delta: int
    ) -> bool:
        """Count ``delta`` more (or, negative, fewer) holds of ``kind`` by ``instance``; the
        session holds ``kind`` while any instance's count is above zero. Whether it does now."""

    async def list_entries(self, session_id: str) -> list[QueueEntry]:
        """Visible entries (not in flight), FIFO order.

        ``QueueEntry.position`` is always the 1-based place among the visible entries (1 = head),
        whatever the stored sort key is, in every method that returns entries."""

    async def add_entry(
        self,
        session_id: str,
        *,
        content: str,
        source: MessageSource,
        client_message_id: str | None = None,
    ) -> QueueEntry:
        """Append at the tail (with the key of the send that queued it, Q15)."""

    async def update_entry(self, entry_id: str, *, content: str) -> QueueEntry: ...

    async def remove_entries(self, session_id: str, entry_ids: Sequence[str] | None) -> int:
        """Delete visible entries (all of them when ``entry_ids`` is None). Returns the count."""

    async def reorder_entries(self, session_id: str, ordered_ids: Sequence[str]) -> None:
        """Give the visible entries positions in this order (caller checked it is exactly them)."""

    async def reserve_head(self, session_id: str, *, owner: int | None = None) -> QueueEntry | None:
        """Mark the FIFO head in flight (reserved by ``owner``) and return it (None when empty)."""

    async def claim_entries(
        self, session_id: str, entry_ids: Sequence[str], *, owner: int | None = None
    ) -> list[QueueEntry]:
        """Mark exactly these visible entries in flight; returns those that were visible (the
        caller compares and rolls back when one is missing)."""

    async def release_entries(self, session_id: str, entry_ids: Sequence[str] | None) -> int:
        """Return in-flight entries (all of the session's when None) to the head of the queue,
        keeping their ids and their relative order (Q10). Returns how many."""

    async def count_in_flight(self, session_id: str, entry_ids: Sequence[str]) -> int:
        """How many of these entries are in flight in this session's queue (a Send Now checks
        that its claim is still its own before it starts, W3)."""

    async def move_entries(self, source_id: str, destination_id: str) -> int:
        """Move every entry of the source to the destination's tail, in order (W3)."""


class RequestsTx(Protocol):
    """Requests kept as rows: keyed sends (Q15), steering (Q16), requests to an owner (M4)."""

    async def sent_message(self, session_id: str, key: str) -> SentMessage | None:
        """What a send of the session with this ``clientMessageId`` did, if one was recorded."""

    async def record_sent_message(self, session_id: str, sent: SentMessage) -> None:
        """Record what a keyed send did (and forget the session's keys past their day)."""

    async def add_steer_request(self, session_id: str, turn_id: str, entry_id: str) -> str:
        """Offer the queued entry to the running turn; the request's id (PENDING)."""

    async def steer_request(self, request_id: str) -> SteerRequest | None: ...

    async def pending_steers(self, session_id: str) -> list[SteerRequest]:
        """The session's undecided requests, oldest first."""

    async def decide_steer(self, request_id: str, state: str) -> bool:
        """Decide a PENDING request (``state``: a SendOutcome), exactly once: False when it was
        decided already."""

    async def add_request(self, owner: int, origin: int, op: str, args: str) -> str:
        """Ask instance ``owner`` to run ``op`` (``args``: JSON); the request's id (PENDING)."""

    async def owner_request(self, request_id: str) -> OwnerRequest | None: ...

    async def pending_requests(self, owner: int) -> list[str]:
        """The ids of the PENDING requests asked of ``owner``, oldest first."""

    async def move_request(
        self,
        request_id: str,
        from_state: RequestState,
        to_state: RequestState,
        outcome: str | None = None,
    ) -> bool:
        """Move a request on, exactly once: False when it was not in ``from_state`` (the other
        side moved it first)."""


class ConversationsTx(Protocol):
    """The agent's own session behind each session (A8, turnqueue/store/conversations.py)."""

    async def conversation(self, session_id: str) -> AgentConversation | None:
        """The session's agent conversation as last recorded; None before its agent started."""

    async def record_conversation(self, conversation: AgentConversation) -> None:
        """Record (replace) the session's agent conversation."""


class Tx(
    UnitOfWork,
    InstancesTx,
    SessionsTx,
    OutputTx,
    ApprovalsTx,
    QueueTx,
    RequestsTx,
    ConversationsTx,
    Protocol,
):
    """One transaction of the store: every aggregate's part, each small enough to read at once."""


class Reads(Protocol):
    """The reads of queries, each in one read transaction of its own (no lock): batches (one
    query for many ids) and keyset pages (G3). The engine hands them to the GraphQL layer as
    they are (``Engine.reads``)."""

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]:
        """The tasks found among ``task_ids``, by id."""

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]:
        """The sessions found among ``session_ids``, by id."""

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        """Each task's sessions, oldest first (an empty list for a task without any)."""

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        """The owner's tasks, newest first. Another owner's tasks are never read (S2)."""

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        """The task's sessions, oldest first."""

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        """The session's turns, oldest first."""


class Store(Reads, Protocol):
    """A database behind the :class:`Tx` interface, plus the reads that need no lock."""

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction. Nested calls are not supported."""

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """A read-only transaction (a consistent snapshot on PostgreSQL, WAL read on SQLite)."""

    def lease(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction for the instance lease (M6), on a connection that request
        traffic cannot take (PostgreSQL); the same as :meth:`transaction` on SQLite."""

    async def close(self) -> None: ...

    @property
    def shared(self) -> bool:
        """True when several processes may share the database (PostgreSQL)."""

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        """A listener for every instance's notifications (M4), not yet started: each payload
        goes to ``on_payload``; ``on_resync`` is called after each reconnect, when what was
        sent during the outage is lost. Only where :attr:`shared` (PostgreSQL)."""

    async def notify(self, payloads: Sequence[str]) -> None:
        """Send runtime notifications to every instance now, in order."""

    async def ping(self) -> None: ...

    async def queue_depth(self) -> tuple[int, int]:
        """(visible, in flight) queue entries over every session (metrics)."""

    async def next_turn(self, session_id: str, after_turn_id: str | None) -> Turn | None:
        """The session's turn that started right after ``after_turn_id`` (None: its first
        turn), whatever its status; None when there is none (yet)."""
