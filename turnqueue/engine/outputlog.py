"""A running turn's durable output log (O1): its records, its flusher, its committed prefix.

The runner adds every piece of output (a text chunk or a :class:`~turnqueue.domain.TurnItem`)
as an :class:`~turnqueue.domain.OutputRecord` (text that follows text in one batch extends the
same record). The process's :class:`Flusher` writes the pending batches of all running turns in
one transaction, at most :data:`FLUSH_SECONDS` after the first of them (at once at
:data:`MAX_BATCH` pieces). The turn's end writes what is still pending in its own transaction
(:meth:`OutputLog.write_rest`), so an ended turn's log is complete and ``done`` follows every
chunk.

Ordering (O2's "no gap, no duplicate"): text is published on the bus only *after* the batch
holding it committed, in the callback that advances :attr:`OutputLog.committed`. So every chunk
a subscriber sees, here or relayed, is already in the log, and a reader that subscribes
*before* it reads the log misses nothing. A SIGKILL loses at most the batch being gathered,
which no client has seen either.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    ItemKind,
    LogBatch,
    OutputChunk,
    OutputRecord,
    Turn,
    TurnItem,
    TurnStatus,
)
from turnqueue.store import Store, Tx

log = logging.getLogger(__name__)

#: The longest a record waits for company before its batch is written (see bench/README).
FLUSH_SECONDS = 0.005
#: A batch is written at once when this many chunks or items are pending.
MAX_BATCH = 32
#: After a failed write, the flusher waits this long before trying again.
RETRY_SECONDS = 0.2
#: Output characters kept per turn; text beyond it is neither logged nor streamed.
MAX_OUTPUT_CHARS = 1_000_000


class Flusher:
    """Writes the pending batches of every running turn of this process in one transaction
    (SQLite has a single writer: a hundred streaming turns must not queue a hundred writes).
    One per store, one writer task at a time; nothing runs while nothing is pending."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._dirty: dict[OutputLog, None] = {}  # an ordered set
        self._in_flight: set[OutputLog] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None

    def want(self, output: OutputLog, *, full: bool) -> None:
        self._dirty[output] = None
        if self._writer is not None:
            return  # the write in flight re-arms when it is done
        if full:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._start)

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is not None or not self._dirty:
            return
        # Sorted by turn: every write takes its turn rows in one order (no deadlock between
        # two instances' flushers; each end takes only its own turn's row).
        dirty = sorted(self._dirty, key=lambda o: o.turn.id)
        self._dirty.clear()
        batches = [(o, batch) for o in dirty if (batch := o._take())]
        if not batches:
            return
        self._in_flight = {o for o, _ in batches}
        self._writer = asyncio.create_task(self._write(batches), name="turn-output-flusher")

    async def _write(self, batches: list[tuple[OutputLog, list[OutputRecord]]]) -> None:
        try:
            async with self._store.transaction() as tx:
                ended = await tx.append_output({o.turn.id: batch for o, batch in batches})
                for output, batch in batches:
                    output._written(tx, batch, ended=output.turn.id in ended)
        except Exception:
            log.exception("could not write the output log of %d turns", len(batches))
            for output, batch in batches:
                output._restore(batch)
                self._dirty[output] = None
            await asyncio.sleep(RETRY_SECONDS)
        finally:
            self._writer = None
            self._in_flight = set()
        if self._dirty:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._start)

    async def forget(self, output: OutputLog) -> None:
        self._dirty.pop(output, None)
        writer = self._writer
        if writer is not None and output in self._in_flight:
            await asyncio.shield(writer)  # not cancelled: a cancelled write would be lost
        self._dirty.pop(output, None)  # a failed write put it back


_FLUSHERS: weakref.WeakKeyDictionary[Store, Flusher] = weakref.WeakKeyDictionary()


def flusher_of(store: Store) -> Flusher:
    """The one flusher of ``store`` (a store belongs to one process and one event loop)."""
    flusher = _FLUSHERS.get(store)
    if flusher is None:
        flusher = _FLUSHERS[store] = Flusher(store)
    return flusher


class OutputLog:
    def __init__(self, turn: Turn, store: Store, bus: EventBus) -> None:
        self.turn = turn
        self._bus = bus
        self._parts: list[str] = []
        self._length = 0  # characters added
        self._seq = 0
        self._pending: list[OutputRecord] = []
        self._pieces = 0  # chunks and items added since the last batch was taken
        #: characters whose batch has committed (and was published)
        self.committed = 0
        self._flusher = flusher_of(store)
        self._closed = False
        #: :meth:`detach` has returned: no write holds this log's batches, nor will
        self.detached = False
        self._ended = False  # the turn ended elsewhere: nothing more is written

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def committed_text(self) -> str:
        """The text subscribers have been sent: a prefix of :attr:`text`."""
        return self.text[: self.committed]

    def add(self, item: str | TurnItem) -> None:
        if isinstance(item, TurnItem) and item.kind is ItemKind.MESSAGE:
            item = str(item.data.get("text", ""))  # a structured text chunk: its text
        if isinstance(item, TurnItem):
            self._append(
                OutputRecord(
                    self.turn.id, self._seq, self._length, item.kind, "", dict(item.data), item.key
                )
            )
        else:
            if not item or self._length >= MAX_OUTPUT_CHARS:
                return
            text = item[: MAX_OUTPUT_CHARS - self._length]
            self._parts.append(text)
            last = self._pending[-1] if self._pending else None
            if last is not None and last.kind is ItemKind.MESSAGE:
                # Text that follows text in one batch is one record (a row per batch, not per
                # token: ~170 bytes of row and index each on PostgreSQL). Hot while a turn
                # streams, so built positionally rather than with dataclasses.replace.
                self._pending[-1] = OutputRecord(
                    last.turn_id, last.seq, last.offset, last.kind, last.text + text
                )
            else:
                self._append(
                    OutputRecord(self.turn.id, self._seq, self._length, ItemKind.MESSAGE, text)
                )
            self._length += len(text)
        self._pieces += 1
        if not self._closed:
            self._flusher.want(self, full=self._pieces >= MAX_BATCH)

    def _append(self, record: OutputRecord) -> None:
        self._seq += 1
        self._pending.append(record)

    def _take(self) -> list[OutputRecord]:
        """The pending batch, for the flusher (nothing once closed: the end writes the rest)."""
        if self._closed or self._ended:
            return []
        batch, self._pending = self._pending, []
        self._pieces = 0
        return batch

    def _restore(self, batch: list[OutputRecord]) -> None:
        """A write failed: the batch goes back in front, for the next try or the end."""
        self._pending = batch + self._pending

    def _written(self, tx: Tx, batch: list[OutputRecord], *, ended: bool) -> None:
        if ended:
            # Recovery ended the turn (this instance was declared dead): the log is closed.
            self._ended = True
            return
        tx.after_commit(lambda: self._publish(batch))

    def _publish(self, batch: list[OutputRecord]) -> None:
        sid = self.turn.session_id
        if batch:  # turnItems (A3, O2): every record, text and items, after its commit
            end = batch[-1].seq + 1
            logged = LogBatch(sid, self.turn.id, end, tuple(batch))
            self._bus.publish(Event(EventKind.ITEMS, sid, batch=logged))
        texts = [r.text for r in batch if r.kind is ItemKind.MESSAGE]
        if not texts:
            return
        offset = self.committed
        text = "".join(texts)
        self.committed += len(text)
        chunk = OutputChunk(
            self.turn.session_id, self.turn.id, offset, text, False, TurnStatus.RUNNING
        )
        self._bus.publish(Event(EventKind.OUTPUT, sid, chunk=chunk))

    async def detach(self) -> None:
        """Stop flushing this turn: a write in flight holding its batch commits or fails
        first; what is still pending is for :meth:`write_rest`. Idempotent."""
        self._closed = True
        await self._flusher.forget(self)
        self.detached = True

    async def write_rest(self, tx: Tx) -> None:
        """In the turn end's transaction, which holds the session's lock row and read the turn
        RUNNING under it (a turn recovery ended takes nothing more): append what is still
        pending, without a check of its own (``running``). It is published after COMMIT,
        before the end's ``done`` (whose callback is registered after this one)."""
        if self._ended or not self._pending:
            return
        rest = list(self._pending)
        await tx.append_output({self.turn.id: rest}, running=True)
        # A retried end (its first transaction rolled back) writes the same records again.

        def committed() -> None:
            if self._pending[: len(rest)] == rest:
                del self._pending[: len(rest)]
            self._publish(rest)

        tx.after_commit(committed)
