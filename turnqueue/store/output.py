"""Output-log statements of :class:`~turnqueue.store.tx.SqlTx`: a turn's durable output (O1), a
sequence of :class:`~turnqueue.domain.OutputRecord` rows in ``turn_output`` numbered by ``seq``
from 0, appended in batches while the turn runs; the turn's end appends the last batch in its
own transaction, so an ended turn's log is complete in the snapshot that shows it ended.

Hazard (an instance declared dead while merely slow): its flusher may still append to a turn
that recovery has ended. :meth:`OutputStatements.append_output` therefore takes the turn rows
(``FOR UPDATE`` on PostgreSQL, in turn-id order; SQLite has one writer) and appends only to
turns still RUNNING, so an ended turn's log never grows. It holds only turn rows, taken in one
order, so it cannot deadlock with another flush nor with an end (lock row, its turn, session).

Each backend appends a flush's records in one statement (PostgreSQL: ``unnest`` over arrays;
SQLite: which turns are RUNNING, then one ``executemany``); a turn's end appends its last batch
unchecked (``running=True``: SQLite's ``executemany`` alone, PostgreSQL's insert with the
COMMIT).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from sqlalchemy import BigInteger, ColumnElement, Integer, bindparam, func, select

from turnqueue.domain import ItemKind, OutputRecord
from turnqueue.store.rows import RowMap
from turnqueue.store.statement import Record, Statement, Statements
from turnqueue.store.tables import turn_output

_o = turn_output


def _records(*where: ColumnElement[bool]) -> Statement:
    """A turn's records (``p_turn_id``) that match ``where``, in order."""
    columns = (_o.c.seq, _o.c.offset, _o.c.kind, _o.c.item_key, _o.c.text, _o.c.data)
    turn = _o.c.turn_id == bindparam("p_turn_id")
    return Statement(select(*columns).where(turn, *where).order_by(_o.c.seq))


#: The MESSAGE records that end after ``p_after`` characters (O2's replay).
_TEXT_AFTER = _records(
    _o.c.kind == ItemKind.MESSAGE.value,
    _o.c.offset + func.length(_o.c.text) > bindparam("p_after", type_=BigInteger),
)
_RECORDS_AFTER = _records(_o.c.seq > bindparam("p_after_seq", type_=Integer))
_RECORD = RowMap(OutputRecord, skip=("turn_id", "data", "key"))  # key: the column ``item_key``


def _record(turn_id: str, row: Record) -> OutputRecord:
    data = row.data
    if isinstance(data, str):  # PostgreSQL ``json`` may come back as its text
        data = json.loads(data)
    return _RECORD(row, turn_id=turn_id, data=data, key=row.item_key)


class OutputStatements(Statements):
    async def append_output(
        self, batches: Mapping[str, Sequence[OutputRecord]], *, running: bool = False
    ) -> set[str]:
        """Append each turn's records to its log while the turn is RUNNING; the turns whose
        records were refused (nothing written) because the turn had ended.

        ``running``: the caller read each turn RUNNING under its session's lock row in this
        transaction (a turn's end): nothing is checked or refused. Hazard: the records may
        then be written only at COMMIT (PostgreSQL), so a later read here need not see them."""
        given = {turn_id for turn_id, records in batches.items() if records}
        if not given:
            return set()
        if running:
            await self._append_running(batches)
            return set()
        return given - await self._append_records(batches)

    async def _append_records(self, batches: Mapping[str, Sequence[OutputRecord]]) -> set[str]:
        """The backend's one statement; the turns whose records it inserted."""
        raise NotImplementedError

    async def _append_running(self, batches: Mapping[str, Sequence[OutputRecord]]) -> None:
        """The backend's insert of records of turns the caller knows are RUNNING (no check);
        it may travel with the COMMIT."""
        raise NotImplementedError

    async def read_output(self, turn_id: str, after_offset: int = 0) -> list[OutputRecord]:
        """The turn's MESSAGE records that end after ``after_offset`` characters, in order."""
        rows = await self._conn.execute(
            _TEXT_AFTER, {"p_turn_id": turn_id, "p_after": after_offset}
        )
        return [_record(turn_id, row) for row in rows]

    async def read_records(self, turn_id: str, after_seq: int = -1) -> list[OutputRecord]:
        """Every record of the turn's log after ``after_seq``, in order (text and items: A3)."""
        rows = await self._conn.execute(
            _RECORDS_AFTER, {"p_turn_id": turn_id, "p_after_seq": after_seq}
        )
        return [_record(turn_id, row) for row in rows]

    async def output_text(self, turn_id: str) -> str:
        """The turn's output text as its log holds it (what a recovered turn keeps, M6)."""
        return "".join(r.text for r in await self.read_output(turn_id, 0))
