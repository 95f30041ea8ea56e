"""Object types of a turn and its streamed output (SPEC §7, A3, O2)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from turnqueue import domain
from turnqueue.domain import AgentErrorKind, MessageSource, TurnStatus
from turnqueue.schema import fields as described
from turnqueue.schema.connections import Connection
from turnqueue.schema.fields import plain
from turnqueue.schema.items import Approval, TurnItem, item_from_domain
from turnqueue.schema.reads import Info, paged


@strawberry.type(description="One prompt of a session and the agent's answer to it.")
class Turn:
    id: strawberry.ID = plain("The turn's id (a UUID).")
    session_id: strawberry.ID = plain("The session it ran in.")
    prompt: str = plain(
        "The prompt the agent was given (Send Now with scope ALL joins its entries with blank "
        "lines)."
    )
    source: MessageSource = plain("Where the prompt came from (a queued entry keeps its source).")
    status: TurnStatus = plain(
        "RUNNING until the turn ends, then how it ended. The end is a new session `revision`."
    )
    output: str = plain(
        "The agent's answer. While the turn runs it may be empty or behind: follow turnOutput for "
        "the live text."
    )
    error: str | None = plain(
        "Why the turn failed or was cut short; null otherwise. The agent's own error answer reads "
        "`agent error <code> (<kind>): <its message>` (A11); a dead agent `agent process exited "
        "(status N)`; `stalled: …` when its agent went silent (A9); `interrupted` when its server "
        "died (M6)."
    )
    error_kind: AgentErrorKind | None = plain(
        "A11: how a FAILED turn's failure is classified (authentication, rate limit, provider "
        "unreachable, internal, its agent's process exited, or stalled: A9); null otherwise and "
        "for failures that are not the agent's (a stop reason, an interruption)."
    )
    agent_stderr: str | None = plain(
        "A11: what the agent wrote to its stderr during the turn (its last 4 KiB), kept apart from "
        "`error`; null while the turn runs, when it wrote nothing, and for the scripted agent."
    )
    client_message_id: str | None = plain(
        "Q15: the `clientMessageId` of the send it came from (directly, or through the queue entry "
        "it started from); null without one."
    )
    queue_entry_id: strawberry.ID | None = plain(
        "Q16: the queue entry it was started from (a drain or a Send Now of one entry); null when "
        "a message started it directly or several entries were sent at once."
    )
    started_at: datetime = plain("When the turn started.")
    ended_at: datetime | None = plain("When it ended; null while RUNNING.")

    @classmethod
    def from_domain(cls, turn: domain.Turn) -> Turn:
        entry_id = strawberry.ID(turn.entry_id) if turn.entry_id is not None else None
        return described.copied(cls, turn, queue_entry_id=entry_id)

    @described.field(
        "The turn's structured output in order (A3): messages, thoughts, tool calls, plans "
        "and raw agent updates (`acp` agents; other agents' text is one MESSAGE item), folded "
        "from the turn's durable output log (O1): every instance answers it, for a running "
        "turn (what has been logged so far) and an ended one. Follow turnItems for live items."
    )
    async def items(self, info: Info) -> list[TurnItem]:
        items = await info.context.turn_items(self.id)
        return [item_from_domain(i, it) for i, it in enumerate(items)]

    items_connection: Connection[TurnItem] = paged(
        "The turn's items (see `items`), a page at a time (G3), in order. An item keeps its "
        "place (a tool call's later updates change it where it is; new items come last), so a "
        "cursor keeps its place while the turn runs.",
        lambda reads, turn, args: reads.items_connection(turn.id, args),
    )

    @described.field(
        "Every permission request the agent made during the turn, with its answer (who, "
        "which option, when), oldest first (A6)."
    )
    async def approvals(self, info: Info) -> list[Approval]:
        return [Approval.from_domain(a) for a in await info.context.approvals_of_turn(self.id)]


@strawberry.type(
    description="A piece of a turn's streamed output, as turnOutput sends it. Streamed output "
    "bumps no revision: place each chunk by `offset`."
)
class TurnOutputChunk(described.Copied[domain.OutputChunk]):
    session_id: strawberry.ID = plain("The session of the turn.")
    turn_id: strawberry.ID = plain(
        "The turn the text belongs to. A new id means a new turn, whose output starts again at "
        "offset 0."
    )
    offset: int = plain(
        "Where `text` starts in the turn's output, in characters. The first message carries the "
        "output so far from 0; later ones continue where the previous ended."
    )
    text: str = plain("The text from `offset` on (empty in a final chunk that only ends the turn).")
    done: bool = plain("True on the turn's last chunk: the turn has ended with `status`.")
    status: TurnStatus = plain("The turn's status: RUNNING, or how it ended when `done`.")


@strawberry.type(
    description="A piece of a turn's structured output (A3), as turnItems sends it: what the "
    "log entries from `offset` up to `nextOffset` changed in the turn's items. Apply each of "
    "`items` by its `index`: a new index appends the item; a known one is replaced by it, "
    "except MessageItem and ThoughtItem, whose `text` here is only the text added (append it). "
    "Folding every chunk from offset 0 gives `Turn.items`."
)
class TurnItemsChunk:
    session_id: strawberry.ID = plain("The session of the turn.")
    turn_id: strawberry.ID = plain(
        "The turn the items belong to. A new id means a new turn, whose log starts again at offset "
        "0."
    )
    offset: int = plain(
        "The position in the turn's output log (O1) of the first entry this message covers. Log "
        "positions count entries (text pieces, thoughts, tool call updates, plans, raw updates), "
        "not characters: they are not turnOutput's offsets."
    )
    next_offset: int = plain(
        "The log position after this message: pass it as `afterOffset` (with `turnId`) to resume "
        "right after it. Over SSE it is the event id `<turnId>:<nextOffset>`."
    )
    items: list[TurnItem] = plain(
        "The items these entries added or changed, in log order (one item may appear more than "
        "once); empty in a final message that only ends the turn."
    )
    done: bool = plain("True on the turn's last message: the turn has ended with `status`.")
    status: TurnStatus = plain("The turn's status: RUNNING, or how it ended when `done`.")

    @classmethod
    def from_domain(cls, chunk: domain.ItemsChunk) -> TurnItemsChunk:
        items = [item_from_domain(i, it) for i, it in chunk.changes]
        return described.copied(cls, chunk, items=items)
