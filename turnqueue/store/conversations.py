"""Agent-conversation statements of :class:`~turnqueue.store.tx.SqlTx` (A8): the ACP agent's
own session behind each turnqueue session, one row per session, read by whichever instance
starts the session's agent again (after an idle stop, a crash, a restart or a failover).

Written outside any session's unit of work: the row belongs to no queue and moves no revision.
A record replaces the session's row (delete, then insert, in the caller's transaction): only the
instance that runs the session's agent writes it.
"""

from __future__ import annotations

from sqlalchemy import String, bindparam, delete, insert, select

from turnqueue.domain import AgentConversation, ConversationStart
from turnqueue.store.conn import Conn
from turnqueue.store.statement import Statement
from turnqueue.store.tables import UtcDateTime, agent_conversations

_ac = agent_conversations
_FIND = Statement(select(_ac).where(_ac.c.session_id == bindparam("p_session_id")))
_FORGET = Statement(delete(_ac).where(_ac.c.session_id == bindparam("p_session_id")))
_RECORD = Statement(
    insert(_ac).values(
        session_id=bindparam("p_session_id"),
        profile=bindparam("p_profile", String),
        agent_session_id=bindparam("p_agent_session_id", String),
        can_resume=bindparam("p_can_resume"),
        can_load=bindparam("p_can_load"),
        can_close=bindparam("p_can_close"),
        resumed=bindparam("p_resumed", String),
        resume_error=bindparam("p_resume_error", String),
        updated_at=bindparam("p_updated_at", type_=UtcDateTime),
    )
)


class ConversationStatements:
    """Mixin: needs ``self._conn``, the transaction's connection."""

    _conn: Conn

    async def conversation(self, session_id: str) -> AgentConversation | None:
        row = (await self._conn.execute(_FIND, {"p_session_id": session_id})).one_or_none()
        if row is None:
            return None
        m = row._mapping
        return AgentConversation(
            session_id=m["session_id"],
            profile=m["profile"],
            agent_session_id=m["agent_session_id"],
            can_resume=bool(m["can_resume"]),
            can_load=bool(m["can_load"]),
            can_close=bool(m["can_close"]),
            resumed=ConversationStart(m["resumed"]),
            resume_error=m["resume_error"],
            updated_at=m["updated_at"],
        )

    async def record_conversation(self, conversation: AgentConversation) -> None:
        c = conversation
        await self._conn.execute(_FORGET, {"p_session_id": c.session_id})
        params = {
            "p_session_id": c.session_id,
            "p_profile": c.profile,
            "p_agent_session_id": c.agent_session_id,
            "p_can_resume": c.can_resume,
            "p_can_load": c.can_load,
            "p_can_close": c.can_close,
            "p_resumed": c.resumed.value,
            "p_resume_error": c.resume_error,
            "p_updated_at": c.updated_at,
        }
        await self._conn.execute(_RECORD, params)
