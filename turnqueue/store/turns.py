r"""Turn statements of :class:`~turnqueue.store.tx.SqlTx`: a turn's start and end, each with the
session write it makes (the state, revision +1, recorded for ``SqlTx.session_revision``), and the
turns' reads. The clauses are exported too: PostgreSQL's one-statement versions are made of them
(``PostgresTx``'s ``_start_turn`` and ``_end_turn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    Text,
    Update,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    literal_column,
    select,
    true,
    update,
)

from turnqueue.domain import (
    AgentErrorKind,
    MessageSource,
    Session,
    SessionState,
    Turn,
    TurnStatus,
    new_id,
    utcnow,
)
from turnqueue.store.rows import RUNNING, SESSION, session_from, turn_from
from turnqueue.store.statement import Params, Statement, Statements
from turnqueue.store.tables import UtcDateTime, queue_entries, sessions, tasks, turns

qe = queue_entries


def session_bump(*, with_state: bool) -> Update:
    values: dict[str, Any] = {
        "revision": sessions.c.revision + 1,
        "updated_at": bindparam("p_now", type_=UtcDateTime),
    }
    if with_state:
        values["state"] = bindparam("p_state", type_=String)
    return (
        update(sessions)
        .where(sessions.c.id == bindparam("p_session_id"))
        .values(**values)
        .returning(sessions.c.revision)
    )


_RUNNING_STATE = SessionState.RUNNING.value  # an enum's ``value`` is a Python-level property
BUMP_SESSION_STATE = Statement(session_bump(with_state=True))


def end_session(session_id: Any) -> Update:
    """A turn's end: the session's new state, and the whole session back (its task's owner by a
    subquery: SQLite's RETURNING cannot name an UPDATE … FROM table). A session whose task
    reached the workflow's last step while the turn ran completes instead of waiting for input
    (``complete_on_idle``, set by :meth:`SqlTx.set_complete_on_idle`), whichever path ends it."""
    state = bindparam("p_state", type_=String)
    completes = and_(sessions.c.complete_on_idle, state == SessionState.WAITING_FOR_INPUT.value)
    return (
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(
            revision=sessions.c.revision + 1,
            updated_at=bindparam("p_now", type_=UtcDateTime),
            state=case((completes, SessionState.COMPLETED.value), else_=state),
            complete_on_idle=false(),
        )
        .returning(
            *sessions.c,
            select(tasks.c.owner)
            .where(tasks.c.id == sessions.c.task_id)
            .scalar_subquery()
            .label("owner"),
        )
    )


_END_SESSION = Statement(end_session(bindparam("p_session_id")))
_TURN_COLUMNS = ["id", "session_id", "seq", "prompt", "source", "status", "output", "started_at"]
#: The next per-session ``seq`` is computed in the INSERT itself.
insert_turn = insert(turns).from_select(
    [*_TURN_COLUMNS, "owner", "client_message_id", "entry_id"],
    select(
        bindparam("p_turn_id", type_=String),
        bindparam("p_session_id", type_=String),
        func.coalesce(func.max(turns.c.seq), 0) + 1,
        bindparam("p_prompt", type_=Text),
        bindparam("p_source", type_=String),
        RUNNING,
        literal_column("''", String),
        bindparam("p_now", type_=UtcDateTime),
        bindparam("p_owner", type_=BigInteger),
        bindparam("p_key", type_=String),
        bindparam("p_entry_id", type_=String),
    ).where(turns.c.session_id == bindparam("p_session_id")),
)
_INSERT_TURN = Statement(insert_turn)
#: The usual case, one entry (several: an IN list compiled per call, see statement.py).
consume_one = delete(qe).where(qe.c.id == bindparam("p_id"), qe.c.in_flight == true())
_CONSUME_ONE = Statement(consume_one)
end_turn_clause = (
    update(turns)
    .where(turns.c.id == bindparam("p_turn_id"), turns.c.status == RUNNING)
    .values(
        status=bindparam("p_status", type_=String),
        output=bindparam("p_output", type_=Text),
        error=bindparam("p_error", type_=Text),
        error_kind=bindparam("p_error_kind", type_=String),
        agent_stderr=bindparam("p_agent_stderr", type_=Text),
        ended_at=bindparam("p_now", type_=UtcDateTime),
    )
    .returning(*turns.c)
)
_END_TURN = Statement(end_turn_clause)
_TURN = Statement(select(turns).where(turns.c.id == bindparam("p_turn_id")))


class TurnStatements(Statements):
    #: the session revision each session's latest write reached (``SqlTx.session_revision``)
    _session_revisions: dict[str, int]

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
        now = utcnow()
        # Positional, in field order (keywords cost a dict per call, on every turn's start).
        turn = Turn(
            new_id(),
            session_id,
            prompt,
            source,
            TurnStatus.RUNNING,
            "",
            None,
            now,
            None,
            owner,
            None,  # error_kind
            None,  # agent_stderr
            client_message_id,
            entry_id,
        )
        params = {
            "p_turn_id": turn.id,
            "p_session_id": session_id,
            "p_prompt": prompt,
            "p_source": source.value,
            "p_now": now,
            "p_owner": owner,
            "p_state": _RUNNING_STATE,
            "p_key": client_message_id,
            "p_entry_id": entry_id,
        }
        self._touched[session_id] = None
        self._session_revisions[session_id] = await self._start_turn(turn, params, consume)
        return turn

    async def _start_turn(self, turn: Turn, params: dict[str, Any], consume: Sequence[str]) -> int:
        """Write the start; the session revision it reached."""
        # Q10: the reserved entries disappear in the same transaction as the turn appears.
        revision = int((await self._conn.one(BUMP_SESSION_STATE, params, turn.session_id))[0])
        await self._conn.execute(_INSERT_TURN, params)
        if len(consume) == 1:
            await self._conn.execute(_CONSUME_ONE, {"p_id": consume[0]})
        elif consume:
            await self._conn.execute(
                delete(qe).where(qe.c.id.in_(list(consume)), qe.c.in_flight == true())
            )
        return revision

    async def end_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        output: str,
        error: str | None,
        session_state: SessionState = SessionState.WAITING_FOR_INPUT,
        error_kind: AgentErrorKind | None = None,
        agent_stderr: str | None = None,
    ) -> tuple[Turn, Session]:
        """End a RUNNING turn and set its session's state (revision +1; a turn's end leaves
        it WAITING_FOR_INPUT, or COMPLETED when ``complete_on_idle``). A turn that is no longer
        RUNNING is left as it is and returned unchanged (idempotent end). A11: its failure's
        classification and its agent's stderr are kept with it."""
        params = {
            "p_turn_id": turn_id,
            "p_status": status.value,
            "p_output": output,
            "p_error": error,
            "p_error_kind": error_kind.value if error_kind is not None else None,
            "p_agent_stderr": agent_stderr,
            "p_now": utcnow(),
            "p_state": session_state.value,
        }
        turn, session = await self._end_turn(turn_id, params)
        self._touched[session.id] = None
        self._session_revisions[session.id] = session.revision  # unchanged if it had ended
        return turn, session

    async def _end_turn(self, turn_id: str, params: dict[str, Any]) -> tuple[Turn, Session]:
        row = (await self._conn.execute(_END_TURN, params)).one_or_none()
        if row is None:
            return await self._ended_turn(turn_id, params)
        bump = {**params, "p_session_id": row.session_id}
        session_row = await self._conn.one(_END_SESSION, bump, row.session_id)
        return turn_from(row), session_from(session_row)

    async def _ended_turn(self, turn_id: str, params: Params) -> tuple[Turn, Session]:
        """A turn already ended (or unknown): idempotent, nothing changes."""
        row = await self._conn.one(_TURN, params, turn_id)
        session_row = await self._conn.one(SESSION, {"p_session_id": row.session_id}, turn_id)
        return turn_from(row), session_from(session_row)

    async def get_turn(self, turn_id: str) -> Turn | None:
        return await self._conn.maybe(_TURN, {"p_turn_id": turn_id}, turn_from)

    async def turn_started_from(self, session_id: str, entry_id: str) -> Turn | None:
        """Q16: the session's turn started from this queue entry, if one was."""
        query = select(turns).where(turns.c.session_id == session_id, turns.c.entry_id == entry_id)
        return await self._conn.maybe(query, None, turn_from)
