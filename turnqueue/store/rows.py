"""Row ↔ domain conversion and the few shared SELECTs of the SQL store.

Hot statements are built once at import with named ``bindparam``s (a
:class:`~turnqueue.store.statement.Statement`) and executed with a parameter dict. Prebuilt
statements keep the literals that partial indexes need (``'RUNNING'``, ``in_flight = false``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args, get_type_hints

from sqlalchemy import ColumnClause, Select, String, bindparam, exists, literal_column, select

from turnqueue.domain import (
    Clarification,
    HoldReason,
    PauseReason,
    QueuePolicy,
    Session,
    SessionParts,
    Task,
    Turn,
    TurnAt,
)
from turnqueue.store.protocol import SessionView
from turnqueue.store.statement import Record, Statement, getter
from turnqueue.store.tables import (
    approvals,
    clarifications,
    queue_session_locks,
    queue_session_state,
    session_holds,
    sessions,
    tasks,
    turns,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

#: Literal (not bound) so PostgreSQL can use the partial index ``ix_turns_running``.
RUNNING: ColumnClause[str] = literal_column("'RUNNING'", String)


class RowMap(Generic[T]):
    """Builds a ``kind`` dataclass from a row by column name: each field from the column of its
    name (after ``prefix``), an enum field from its stored value (NULL stays None). ``skip``:
    fields that are no column, given by the caller (``map(row, position=…)``), or defaulted
    when they come last.

    Hot path (every row the store maps): the row's values are taken by position, enums by a
    dict of their members, and the dataclass is built positionally (keywords would build a
    dict of them first)."""

    __slots__ = ("_enums", "_inserted", "_kind", "_names", "_of_row", "columns")

    def __init__(self, kind: type[T], *, prefix: str = "", skip: Sequence[str] = ()) -> None:
        hints = get_type_hints(kind)
        self._kind = kind
        names = [f.name for f in fields(kind)]
        self._names = [name for name in names if name not in skip]
        #: Skipped fields before a column's, by field position: the caller gives them.
        last = max((i for i, name in enumerate(names) if name not in skip), default=-1)
        self._inserted = [(i, name) for i, name in enumerate(names[:last]) if name in skip]
        #: The columns it reads, in field order.
        self.columns: list[str] = [prefix + name for name in self._names]
        #: (position, column, enum, the enum's members by stored value)
        self._enums: list[tuple[int, str, type[Enum], dict[Any, Enum]]] = []
        for i, (name, column) in enumerate(zip(self._names, self.columns, strict=True)):
            hint = hints[name]
            found = (t for t in (hint, *get_args(hint)) if isinstance(t, type))
            enum = next((t for t in found if issubclass(t, Enum)), None)
            if enum is not None:
                self._enums.append((i, column, enum, {m.value: m for m in enum}))
        self._of_row = columns(*self.columns)

    def __call__(self, row: Record, **given: Any) -> T:
        """``given``: the caller's own keywords (a dict of this call's, taken from here)."""
        values = list(self._of_row(row))
        for i, column, enum, members in self._enums:
            value = values[i]
            if value is not None:
                member = members.get(value)
                if member is None:
                    raise ValueError(f"{column} holds {value!r}, not a {enum.__name__}")
                values[i] = member
        for i, name in self._inserted:
            values.insert(i, given.pop(name))
        return self._kind(*values, **given) if given else self._kind(*values)


def columns(*names: str) -> Callable[[Record], tuple[Any, ...]]:
    """The values of the named columns of a row, in the order named (a function, not a class
    with ``__call__``: calling an instance costs several times a function call)."""
    #: By row class (one per column list): the named columns' values, by position.
    getters: dict[type[Record], Callable[[Record], tuple[Any, ...]]] = {}

    def of(row: Record) -> tuple[Any, ...]:
        get = getters.get(type(row))
        if get is None:
            get = getters[type(row)] = getter([row._index[name] for name in names])
        return get(row)

    return of


def values_of(obj: DataclassInstance, prefix: str = "") -> dict[str, Any]:
    """The fields of ``obj`` by name (after ``prefix``), an enum as its stored value: the
    parameters of an insert of it."""
    values = {prefix + f.name: getattr(obj, f.name) for f in fields(obj)}
    return {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}


task_from = RowMap(Task)
turn_from = RowMap(Turn)
_SESSION = RowMap(Session, skip=("parts",))
_CLARIFICATION = RowMap(Clarification, prefix="clarification_")
_CURRENT_TURN = RowMap(TurnAt, prefix="current_turn_")


def session_from(row: Record) -> Session:
    if "current_turn_id" not in row._index:  # not a read of ``select_sessions`` (a RETURNING)
        return _SESSION(row)
    clarification = _CLARIFICATION(row) if row.clarification_id is not None else None
    current = _CURRENT_TURN(row) if row.current_turn_id is not None else None
    return _SESSION(row, parts=SessionParts(clarification, row.pending_approval_id, current))


#: A session's clarification (outer-joined as ``clarifications``), read by ``_CLARIFICATION``.
_CLARIFICATION_COLUMNS = [c.label(f"clarification_{c.key}") for c in clarifications.c]


def select_sessions() -> Select[Any]:
    """Sessions with their task's owner and the parts their revision covers (R1, R3): the
    clarification, the pending approval of the running turn, the newest turn's status — all in
    this one statement, so a session read at one revision always shows the same parts."""
    clar = clarifications
    current = turns.alias("current_turn")
    asked_in = turns.alias("asked_in")
    newest = (
        select(turns.c.id)
        .where(turns.c.session_id == sessions.c.id)
        .order_by(turns.c.seq.desc())
        .limit(1)
        .scalar_subquery()
    )
    pending_approval = (
        select(approvals.c.id)
        .join(asked_in, asked_in.c.id == approvals.c.turn_id)
        .where(
            approvals.c.session_id == sessions.c.id,
            approvals.c.outcome == literal_column("'PENDING'", String),
            asked_in.c.status == RUNNING,
        )
        .order_by(approvals.c.requested_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    return select(
        *sessions.c,
        tasks.c.owner,
        *_CLARIFICATION_COLUMNS,
        pending_approval.label("pending_approval_id"),
        current.c.id.label("current_turn_id"),
        current.c.status.label("current_turn_status"),
        current.c.error.label("current_turn_error"),
        current.c.ended_at.label("current_turn_ended_at"),
    ).select_from(
        sessions.join(tasks, tasks.c.id == sessions.c.task_id)
        .outerjoin(clar, clar.c.session_id == sessions.c.id)
        .outerjoin(current, current.c.id == newest)
    )


def _select_view() -> Select[Any]:
    """Everything :class:`SessionView` needs in one statement, driven by the lock row."""
    locks, state, clar = queue_session_locks, queue_session_state, clarifications

    def running_turn(column: Any) -> Any:
        return (
            select(column)
            .where(turns.c.session_id == locks.c.session_id, turns.c.status == RUNNING)
            .order_by(turns.c.seq.desc())
            .limit(1)
            .scalar_subquery()
        )

    running = running_turn(turns.c.id)
    running_owner = running_turn(turns.c.owner)

    def held(kind: HoldReason) -> Any:
        return exists().where(
            session_holds.c.session_id == locks.c.session_id,
            session_holds.c.kind == literal_column(f"'{kind.value}'", String),
        )

    # A6: an approval waits for its answer while it is PENDING and its turn runs.
    approval_pending = exists().where(
        approvals.c.session_id == locks.c.session_id,
        approvals.c.outcome == literal_column("'PENDING'", String),
        exists().where(turns.c.id == approvals.c.turn_id, turns.c.status == RUNNING),
    )
    return (
        select(
            *sessions.c,
            tasks.c.owner,
            locks.c.revision.label("queue_revision"),
            state.c.auto_run,
            state.c.pause_reason,
            *_CLARIFICATION_COLUMNS,
            # Kept by triggers (migration 0004), so the view never counts the queue.
            locks.c.queued,
            running.label("running_turn_id"),
            running_owner.label("running_turn_owner"),
            locks.c.cancel_mark,
            locks.c.cancel_revision,
            held(HoldReason.CANCELLING).label("cancelling"),
            held(HoldReason.WORKFLOW_TRANSITION).label("transitioning"),
            approval_pending.label("approval_pending"),
        )
        .select_from(
            locks.join(sessions, sessions.c.id == locks.c.session_id)
            .join(tasks, tasks.c.id == sessions.c.task_id)
            .outerjoin(state, state.c.session_id == locks.c.session_id)
            .outerjoin(clar, clar.c.session_id == locks.c.session_id)
        )
        .where(locks.c.session_id == bindparam("p_session_id"))
    )


#: Prebuilt: execute with ``{"p_session_id": …}``. Prebuilt parameter names start with ``p_``
#: because SQLAlchemy reserves column names for the parameters of INSERT and UPDATE.
VIEW = Statement(_select_view())
SESSION = Statement(select_sessions().where(sessions.c.id == bindparam("p_session_id")))


#: The view's columns besides its session's and its clarification's: the policy's, then those
#: of :class:`SessionView`'s fields after its session, policy and clarification (by name).
_POLICY_COLUMNS = columns("queue_revision", "auto_run", "pause_reason", "clarification_id")
_VIEW_COLUMNS = columns(*(f.name for f in fields(SessionView)[3:]))


def view_from(row: Record) -> SessionView:
    revision, auto_run, pause_reason, clarification_id = _POLICY_COLUMNS(row)
    session = _SESSION(row)
    # Q1: no policy row reads auto_run true.
    pause = PauseReason(pause_reason) if pause_reason is not None else None
    policy = QueuePolicy(session.id, True if auto_run is None else auto_run, pause, revision)
    clarification = _CLARIFICATION(row) if clarification_id is not None else None
    # Positional (keywords cost a dict per call, on every lock); the tests read every field back.
    return SessionView(session, policy, clarification, *_VIEW_COLUMNS(row))
