"""Agent-conversation statements of :class:`~turnqueue.store.tx.SqlTx` (A8): the agent's own
session behind each turnqueue session, read by whichever instance starts its agent again. No
queue's and no revision's: a record replaces the row, written only by the instance that runs the
session's agent.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, insert, select

from turnqueue.domain import AgentConversation
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Statement, Statements
from turnqueue.store.tables import agent_conversations

_ac = agent_conversations
_FIND = Statement(select(_ac).where(_ac.c.session_id == bindparam("p_session_id")))
_FORGET = Statement(delete(_ac).where(_ac.c.session_id == bindparam("p_session_id")))
#: Every column, given by name (``values_of`` the conversation).
_RECORD = Statement(insert(_ac))
_CONVERSATION = RowMap(AgentConversation)


class ConversationStatements(Statements):
    async def conversation(self, session_id: str) -> AgentConversation | None:
        """The session's agent conversation as last recorded; None before its agent started."""
        return await self._conn.maybe(_FIND, {"p_session_id": session_id}, _CONVERSATION)

    async def record_conversation(self, conversation: AgentConversation) -> None:
        """Record (replace) the session's agent conversation."""
        await self._conn.execute(_FORGET, {"p_session_id": conversation.session_id})
        await self._conn.execute(_RECORD, values_of(conversation))
