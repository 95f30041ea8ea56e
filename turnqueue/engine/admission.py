"""What a send did (``Admission``, Q16), and its record under the send's key (Q15): a later
send with the same key answers that outcome instead of acting again (``replay``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from turnqueue.domain import (
    MessageSource,
    QueueEntry,
    QueueStatus,
    SendOutcome,
    SentMessage,
    Session,
    Turn,
    utcnow,
)
from turnqueue.engine.unit_of_work import Change
from turnqueue.errors import Conflict, ErrorCode


@dataclass(frozen=True, slots=True)
class Admission:
    """What a send did (Q16): started ``turn``, queued ``entry``, or steered into ``turn``;
    ``session`` and ``queue``: the state the send left, as its own transaction committed it
    (``Engine.send_message`` always sets them: a mutation's whole answer, R3)."""

    turn: Turn | None = None
    entry: QueueEntry | None = None
    outcome: SendOutcome = SendOutcome.STARTED
    session: Session | None = None
    queue: QueueStatus | None = None


def content_digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


async def replay(c: Change, key: str | None, content: str) -> Admission | None:
    """What the send with this key (None: none) did, if one was recorded (Q15): the same turn
    (as it is now) and the same entry (as it is now, or as it was queued once it has left the
    queue); IDEMPOTENCY_CONFLICT for the same key with other content. Read under the session's
    lock row (``c``), so a retry racing the first send reads what that send committed."""
    sent = await c.tx.sent_message(c.session_id, key) if key is not None else None
    if sent is None:
        return None
    if sent.digest != content_digest(content):
        raise Conflict(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"clientMessageId {key!r} was already sent in this session with other content",
            ["clientMessageId"],
        )
    turn = await c.tx.get_turn(sent.turn_id) if sent.turn_id is not None else None
    entry = None
    if sent.entry_id is not None:
        visible = {e.id: e for e in await c.tx.list_entries(c.session_id)}
        entry = visible.get(sent.entry_id) or QueueEntry(
            sent.entry_id,
            c.session_id,
            sent.position or 1,
            content,
            MessageSource.USER,
            sent.queued_at or utcnow(),
            key,
        )
    return Admission(turn=turn, entry=entry, outcome=sent.outcome)


async def record(c: Change, key: str | None, content: str, admission: Admission) -> None:
    """Q15: what this keyed send did, in its own unit of work (nothing without a key)."""
    if key is None:
        return
    entry, turn = admission.entry, admission.turn
    await c.tx.record_sent_message(
        c.session_id,
        SentMessage(
            key,
            content_digest(content),
            admission.outcome,
            entry.id if entry is not None else None,
            turn.id if turn is not None else None,
            entry.position if entry is not None else None,
            entry.queued_at if entry is not None else None,
        ),
    )
