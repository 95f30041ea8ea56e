"""A turn's output: its structured items (A3), its durable log (O1), and what readers and
subscribers are sent of it (O2, M4)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from turnqueue.domain.sessions import TurnStatus
from turnqueue.domain.values import value


@value
class OutputChunk:
    session_id: str
    turn_id: str
    offset: int
    text: str
    done: bool
    status: TurnStatus


@value
class OutputMark:
    """A turn's output log committed up to ``end`` characters (O1), as another instance
    announces it (M4): no text, so a notification never carries what can exceed its limit; its
    readers read the log. ``done``: the turn has ended (with ``status``)."""

    session_id: str
    turn_id: str
    end: int
    done: bool
    status: TurnStatus


class ItemKind(StrEnum):
    MESSAGE = "MESSAGE"  # data {"text": str}; also appended to Turn.output
    THOUGHT = "THOUGHT"  # data {"text": str}
    TOOL_CALL = "TOOL_CALL"  # data {"toolCallId","title","kind","status","content","locations"}; later updates carry the same key  # noqa: E501
    PLAN = "PLAN"  # data {"entries": [{"content","priority","status"}]}
    RAW = "RAW"  # any other session/update, kept as JSON
    STEER = "STEER"  # data {"text": str, "entryId": str}: a message steered into the turn (Q16)


@value
class TurnItem:
    """One structured piece of a turn's output (A3); a plain text chunk is a MESSAGE item."""

    kind: ItemKind
    data: Mapping[str, Any]
    key: str | None = None  # upsert key (a tool call's id): later items with the same key update it


@value
class OutputRecord:
    """One entry of a turn's durable output log (O1).

    ``seq`` numbers the turn's records from 0; ``offset`` is the number of output characters
    (MESSAGE text) before this record, so a MESSAGE record covers ``offset .. offset+len(text)``."""

    turn_id: str
    seq: int
    offset: int
    kind: ItemKind
    text: str = ""
    data: Mapping[str, Any] | None = None
    key: str | None = None


@value
class LogBatch:
    """Records of a turn's log that just committed (O1), as the bus carries them: ``end`` is the
    log's length after them. A batch relayed from another instance carries no records (only
    ``end``): its readers read the log."""

    session_id: str
    turn_id: str
    end: int
    records: tuple[OutputRecord, ...] = ()


@value
class ItemsChunk:
    """What ``turnItems`` sends (A3, O2): the changes log entries ``offset .. next_offset-1``
    made to the turn's items, each as ``(index, item)`` (see :mod:`turnqueue.engine.reads`)."""

    session_id: str
    turn_id: str
    offset: int
    next_offset: int
    changes: tuple[tuple[int, TurnItem], ...]
    done: bool
    status: TurnStatus
