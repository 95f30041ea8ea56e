"""What tests read or write in an engine that no caller of it needs: a session's pending
clarification and approval (from its rows, any instance), and a hold taken by hand."""

from __future__ import annotations

from turnqueue.domain import Approval, Clarification, HoldReason
from turnqueue.engine import Engine


async def clarification(engine: Engine, session_id: str) -> Clarification | None:
    async with engine.store.read() as tx:
        view = await tx.view(session_id)
    return view.clarification if view else None


async def pending_approval(engine: Engine, session_id: str) -> Approval | None:
    """A6: the session's approval waiting for an answer (its parts name it, R3)."""
    async with engine.store.read() as tx:
        session = await tx.get_session(session_id)
        parts = session.parts if session is not None else None
        if parts is None or parts.pending_approval_id is None:
            return None
        return await tx.get_approval(parts.pending_approval_id)


async def add_hold(engine: Engine, session_id: str, reason: HoldReason) -> None:
    """One more hold of ``reason`` by the engine's instance, committed now (Q9, Q13)."""
    async with engine.core.change(session_id, session_lock=False) as c:
        await c.change_hold(reason, 1)
