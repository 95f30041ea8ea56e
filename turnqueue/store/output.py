"""Output-log statements of :class:`~turnqueue.store.tx.SqlTx`: a turn's durable output (O1).

A turn's log is a sequence of :class:`~turnqueue.domain.OutputRecord` rows in ``turn_output``,
numbered by ``seq`` from 0. The owner's flusher appends them in batches while the turn runs, and
the turn's end appends the last batch in its own transaction, so an ended turn's log is complete
in the same snapshot that shows it ended.

Hazard (an instance declared dead while merely slow): its flusher may still try to append to a
turn that recovery has already ended. :meth:`OutputStatements.append_output` therefore takes the
turn row (``FOR UPDATE`` on PostgreSQL; SQLite has a single writer) and appends only while the
turn is RUNNING: once its end is committed the log never grows, so every reader of an ended turn
sees the same log. It holds only that row, so it cannot deadlock with an end (lock row, turn,
session).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Integer,
    String,
    Text,
    bindparam,
    func,
    insert,
    select,
)

from turnqueue.domain import ItemKind, OutputRecord
from turnqueue.store.conn import Conn
from turnqueue.store.rows import RUNNING
from turnqueue.store.statement import Record, Statement
from turnqueue.store.tables import turn_output, turns

_TAKE_RUNNING = Statement(
    select(turns.c.id)
    .where(turns.c.id == bindparam("p_turn_id"), turns.c.status == RUNNING)
    .with_for_update()
)
#: SQLite: one prebuilt insert run per record (in-process, no round trip).
_INSERT_ONE = Statement(
    insert(turn_output).values(
        turn_id=bindparam("p_turn_id", type_=String),
        seq=bindparam("p_seq", type_=Integer),
        offset=bindparam("p_offset", type_=BigInteger),
        kind=bindparam("p_kind", type_=String),
        item_key=bindparam("p_key", type_=String),
        text=bindparam("p_text", type_=Text),
        data=bindparam("p_data", type_=JSON),
    )
)
_COLUMNS = (
    turn_output.c.seq,
    turn_output.c.offset,
    turn_output.c.kind,
    turn_output.c.item_key,
    turn_output.c.text,
    turn_output.c.data,
)
#: The MESSAGE records that end after ``p_after`` characters, in order (O2's replay).
_TEXT_AFTER = Statement(
    select(*_COLUMNS)
    .where(
        turn_output.c.turn_id == bindparam("p_turn_id"),
        turn_output.c.kind == ItemKind.MESSAGE.value,
        turn_output.c.offset + func.length(turn_output.c.text)
        > bindparam("p_after", type_=BigInteger),
    )
    .order_by(turn_output.c.seq)
)
_RECORDS_AFTER = Statement(
    select(*_COLUMNS)
    .where(
        turn_output.c.turn_id == bindparam("p_turn_id"),
        turn_output.c.seq > bindparam("p_after_seq", type_=Integer),
    )
    .order_by(turn_output.c.seq)
)


def _record(turn_id: str, row: Record) -> OutputRecord:
    data = row.data
    if isinstance(data, str):  # PostgreSQL ``json`` may come back as its text
        data = json.loads(data)
    return OutputRecord(
        turn_id=turn_id,
        seq=int(row.seq),
        offset=int(row.offset),
        kind=ItemKind(row.kind),
        text=row.text,
        data=data,
        key=row.item_key,
    )


class OutputStatements:
    """Mixin: needs ``self._conn``. ``PostgresTx`` sends a batch in one round trip."""

    _conn: Conn

    async def append_output(self, turn_id: str, records: Sequence[OutputRecord]) -> bool:
        """Append ``records`` to a RUNNING turn's log; False (nothing written) once it ended."""
        if await self._conn.scalar(_TAKE_RUNNING, {"p_turn_id": turn_id}) is None:
            return False
        for r in records:  # one prebuilt statement per record (SQLite: in process)
            params: dict[str, Any] = {
                "p_turn_id": turn_id,
                "p_seq": r.seq,
                "p_offset": r.offset,
                "p_kind": r.kind.value,
                "p_key": r.key,
                "p_text": r.text,
                "p_data": None if r.data is None else dict(r.data),
            }
            await self._conn.execute(_INSERT_ONE, params)
        return True

    async def read_output(self, turn_id: str, after_offset: int = 0) -> list[OutputRecord]:
        """The MESSAGE records of the turn's log that end after ``after_offset`` characters."""
        rows = await self._conn.execute(
            _TEXT_AFTER, {"p_turn_id": turn_id, "p_after": after_offset}
        )
        return [_record(turn_id, row) for row in rows]

    async def read_records(self, turn_id: str, after_seq: int = -1) -> list[OutputRecord]:
        """Every record of the turn's log after ``after_seq``, in order (text and items)."""
        rows = await self._conn.execute(
            _RECORDS_AFTER, {"p_turn_id": turn_id, "p_after_seq": after_seq}
        )
        return [_record(turn_id, row) for row in rows]

    async def output_text(self, turn_id: str) -> str:
        """The turn's output text as its log holds it (what a recovered turn keeps, M6)."""
        return "".join(r.text for r in await self.read_output(turn_id, 0))
