"""How a session's ACP agent opens its conversation (SPEC A8): continue the agent's own session
that the session's records keep, or start a new one.

When an agent process starts for a session whose records name an agent session (an earlier
process of it answered ``session/new``, on this instance or another), the agent is asked to
continue it: ``session/resume`` when it advertises ``sessionCapabilities.resume``, else
``session/load`` when it advertises ``loadSession``; else, or when that request fails, a new
``session/new``. The outcome (NEW, RESUMED or LOADED, and why a resume failed) is recorded for
the session (:class:`ConversationLog`) and logged.

Hazard: ``session/load`` replays the whole history as ``session/update`` notifications before it
answers. They arrive while the process serves no turn (``AcpProcess.run`` is None during the
start), so they are dropped and never reach a turn's output or items.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from acp import RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import AgentCapabilities

from turnqueue.agents.acp_errors import failure_of
from turnqueue.domain import AgentConversation, ConversationStart, utcnow

log = logging.getLogger(__name__)


class ConversationLog(Protocol):
    """Where each session's agent conversation is kept (A8). Set by the engine (the session's
    records, shared by every instance); an agent on its own keeps them in memory. Neither call
    raises: a read that fails is no conversation, a write that fails is logged."""

    async def conversation(self, session_id: str) -> AgentConversation | None: ...

    async def record(self, conversation: AgentConversation) -> None: ...

    async def release_elsewhere(self, session_id: str) -> None:
        """Before the conversation is continued here: stop the session's agent wherever else it
        runs (another instance's idle process may hold it open, and an agent may refuse to
        resume a session another of its processes holds: fast-agent does)."""


class MemoryConversations:
    """A :class:`ConversationLog` in this process's memory (an agent without an engine)."""

    def __init__(self) -> None:
        self._kept: dict[str, AgentConversation] = {}

    async def conversation(self, session_id: str) -> AgentConversation | None:
        return self._kept.get(session_id)

    async def record(self, conversation: AgentConversation) -> None:
        self._kept[conversation.session_id] = conversation

    async def release_elsewhere(self, session_id: str) -> None:
        pass  # one process: nowhere else


@dataclass(frozen=True, slots=True)
class Advertised:
    """The session methods an agent advertised in ``initialize``."""

    resume: bool = False
    load: bool = False
    close: bool = False


def advertised(caps: AgentCapabilities | None) -> Advertised:
    if caps is None:
        return Advertised()
    sessions = caps.session_capabilities
    return Advertised(
        resume=sessions is not None and sessions.resume is not None,
        load=bool(caps.load_session),
        close=sessions is not None and sessions.close is not None,
    )


async def open_conversation(
    conn: ClientSideConnection,
    *,
    session_id: str,
    profile: str,
    cwd: Path,
    offers: Advertised,
    stored: AgentConversation | None,
    new: Callable[[], Awaitable[str]],
) -> AgentConversation:
    """Continue ``stored`` (the session's conversation as recorded) if the agent can, else open a
    new one with ``new`` (``session/new``, whose errors are the caller's). The result is what
    should be recorded; its ``agent_session_id`` is the session to prompt."""
    error: str | None = None
    how, agent_session_id = ConversationStart.NEW, None
    if stored is not None and stored.profile == profile:
        method = "session/resume" if offers.resume else "session/load" if offers.load else None
        if method is None:
            log.info(
                "session %s: agent %s advertises neither session/resume nor session/load; "
                "its conversation %s is not continued",
                session_id,
                profile,
                stored.agent_session_id,
            )
        else:
            previous = stored.agent_session_id
            try:
                if offers.resume:
                    await conn.resume_session(session_id=previous, cwd=str(cwd), mcp_servers=[])
                    how = ConversationStart.RESUMED
                else:
                    await conn.load_session(cwd=str(cwd), session_id=previous, mcp_servers=[])
                    how = ConversationStart.LOADED
            except Exception as exc:
                error = f"{method} failed: {_reason(exc)}"
                log.warning(
                    "session %s: %s of agent session %s failed (%s); starting a new one",
                    session_id,
                    method,
                    previous,
                    error,
                )
            else:
                agent_session_id = previous
                log.info(
                    "session %s: agent %s continued its session %s (%s)",
                    session_id,
                    profile,
                    previous,
                    how.value,
                )
    if agent_session_id is None:
        agent_session_id = await new()
        log.info(
            "session %s: agent %s opened a new session %s", session_id, profile, agent_session_id
        )
    return AgentConversation(
        session_id=session_id,
        profile=profile,
        agent_session_id=agent_session_id,
        can_resume=offers.resume,
        can_load=offers.load,
        can_close=offers.close,
        resumed=how,
        resume_error=error,
        updated_at=utcnow(),
    )


def _reason(exc: Exception) -> str:
    if isinstance(exc, RequestError):
        return failure_of(exc).text
    return str(exc) or type(exc).__name__
