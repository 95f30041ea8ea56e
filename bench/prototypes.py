"""Throwaway prototypes of the fixes the profiles point at, applied by monkeypatching for a
before/after measurement only (``python -m bench --prototype NAME``). Nothing here changes
turnqueue's own files; each docstring names the code the real fix belongs in.

* ``coalesce`` — ``turnqueue/engine/core.py`` ``Core.queue_status``: every subscriber of a session
  re-reads the queue status from the database on every event (N reads per event for N
  subscribers). Single-flight it: concurrent callers for one session share one read; a QUEUE
  event published on the bus drops the shared read, so nobody gets a snapshot older than the
  event that woke them.
* ``prebuilt`` — ``turnqueue/store/rows.py`` ``select_view`` / ``select_visible`` (and their
  callers ``SqlTx.view``, ``EntryStatements.list_entries``): the statements are rebuilt on every
  call (a three-subquery SELECT), which the profiles show costing more than running them. Build
  them once with ``bindparam("session_id")`` and execute with parameters.
* ``multiplex`` — ``turnqueue/transport.py``: execute a ``queueStatusChanged`` subscription once
  per group of identical subscriptions (same document, variables and principal) and send the
  same encoded payload to every member, as measured in shared/NOTES.md. Late joiners get the
  group's last payload first. (Prototype: no per-member buffer bound, no slow-consumer policy.)
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from contextlib import aclosing, suppress
from typing import Any

ENV = "BENCH_PROTOTYPES"


def names_from_env() -> list[str]:
    return [n for n in os.environ.get(ENV, "").split(",") if n]


def install(names: list[str]) -> None:
    for name in names:
        {
            "coalesce": install_coalesce,
            "prebuilt": install_prebuilt,
            "multiplex": install_multiplex,
        }[name]()


# -- coalesce -----------------------------------------------------------------------------------
def install_coalesce() -> None:
    from turnqueue.bus import Event, EventKind
    from turnqueue.domain import QueueStatus
    from turnqueue.engine.core import Core

    original = Core.queue_status
    shared: weakref.WeakKeyDictionary[Core, dict[str, asyncio.Future[QueueStatus]]] = (
        weakref.WeakKeyDictionary()
    )

    async def queue_status(self: Core, session_id: str) -> QueueStatus:
        reads = shared.get(self)
        if reads is None:
            reads = shared[self] = {}

            def forget(event: Event, reads: dict[str, Any] = reads) -> None:
                if event.kind in (EventKind.QUEUE, EventKind.RESYNC):
                    reads.pop(event.session_id, None)

            self.bus.add_listener(forget)
        future = reads.get(session_id)
        if future is None:
            future = asyncio.ensure_future(original(self, session_id))
            reads[session_id] = future

            def done(f: asyncio.Future[QueueStatus], sid: str = session_id) -> None:
                if reads.get(sid) is f:
                    del reads[sid]

            future.add_done_callback(done)
        return await asyncio.shield(future)

    Core.queue_status = queue_status  # type: ignore[method-assign]


# -- prebuilt -----------------------------------------------------------------------------------
def install_prebuilt() -> None:
    from sqlalchemy import (
        BigInteger,
        String,
        Text,
        bindparam,
        delete,
        false,
        func,
        literal_column,
        select,
        true,
        update,
    )

    from turnqueue.domain import (
        MessageSource,
        QueueEntry,
        SessionState,
        Turn,
        TurnStatus,
        new_id,
        utcnow,
    )
    from turnqueue.store.protocol import SessionView
    from turnqueue.store.rows import (
        VISIBLE,
        entries_from,
        entry_from,
        select_view,
        select_visible,
        view_from,
    )
    from turnqueue.store.tables import (
        UtcDateTime,
        queue_entries,
        queue_session_locks,
        sessions,
        turns,
    )
    from turnqueue.store.tx import SqlTx

    qe, locks = queue_entries, queue_session_locks
    view_stmt = select_view(bindparam("v_sid"))  # type: ignore[arg-type]
    visible_stmt = select_visible(bindparam("v_sid"))  # type: ignore[arg-type]
    lock_stmt = select(locks.c.session_id).where(locks.c.session_id == bindparam("l_sid"))
    lock_stmt = lock_stmt.with_for_update()
    head_alias = qe.alias("head")
    head = (
        select(head_alias.c.id)
        .where(head_alias.c.session_id == bindparam("h_sid"), head_alias.c.in_flight == false())
        .order_by(head_alias.c.position, head_alias.c.id)
        .limit(1)
        .scalar_subquery()
    )
    reserve_stmt = (
        update(qe)
        .where(qe.c.id == head, VISIBLE)
        .values(
            in_flight=True,
            reserved_at=bindparam("h_at", type_=UtcDateTime),
            reserved_by=bindparam("h_by", type_=BigInteger),
        )
        .returning(*qe.c)
    )
    running_stmt = (
        update(sessions)
        .where(sessions.c.id == bindparam("s_sid"))
        .values(
            revision=sessions.c.revision + 1,
            updated_at=bindparam("s_at", type_=UtcDateTime),
            state=SessionState.RUNNING.value,
        )
        .returning(sessions.c.revision)
    )
    next_seq = select(
        bindparam("t_id", type_=String),
        bindparam("t_sid", type_=String),
        func.coalesce(func.max(turns.c.seq), 0) + 1,
        bindparam("t_prompt", type_=Text),
        bindparam("t_source", type_=String),
        literal_column("'RUNNING'"),
        literal_column("''"),
        bindparam("t_at", type_=UtcDateTime),
        bindparam("t_owner", type_=BigInteger),
    ).where(turns.c.session_id == bindparam("t_sid2"))
    cols = ["id", "session_id", "seq", "prompt", "source", "status", "output", "started_at"]
    insert_turn = turns.insert().from_select([*cols, "owner"], next_seq)
    consume_stmt = delete(qe).where(
        qe.c.id.in_(bindparam("c_ids", expanding=True)), qe.c.in_flight == true()
    )
    bump_stmt = (
        update(locks)
        .where(locks.c.session_id == bindparam("q_sid"))
        .values(revision=locks.c.revision + 1)
        .returning(locks.c.revision)
    )

    async def view(self: SqlTx, session_id: str) -> SessionView | None:
        row = (await self._conn.execute(view_stmt, {"v_sid": session_id})).one_or_none()
        return view_from(row) if row is not None else None

    async def lock(self: SqlTx, session_id: str) -> SessionView:
        if self._pg and await self._conn.scalar(lock_stmt, {"l_sid": session_id}) is None:
            raise KeyError(session_id)
        found = await view(self, session_id)
        if found is None:
            raise KeyError(session_id)
        return found

    async def list_entries(self: SqlTx, session_id: str) -> list[QueueEntry]:
        result = await self._conn.execute(visible_stmt, {"v_sid": session_id})
        return entries_from(result.all())

    async def reserve_head(
        self: SqlTx, session_id: str, *, owner: int | None = None
    ) -> QueueEntry | None:
        params = {"h_sid": session_id, "h_at": utcnow(), "h_by": owner}
        row = (await self._conn.execute(reserve_stmt, params)).one_or_none()
        return entry_from(row, 1) if row is not None else None

    async def start_turn(
        self: SqlTx,
        session_id: str,
        *,
        prompt: str,
        source: MessageSource,
        consume: Any = (),
        owner: int | None = None,
    ) -> Turn:
        now = utcnow()
        if await self._conn.scalar(running_stmt, {"s_sid": session_id, "s_at": now}) is None:
            raise KeyError(session_id)
        turn = Turn(
            new_id(), session_id, prompt, source, TurnStatus.RUNNING, "", None, now, None, owner
        )
        params = {
            "t_id": turn.id,
            "t_sid": session_id,
            "t_prompt": prompt,
            "t_source": source.value,
            "t_at": now,
            "t_owner": owner,
            "t_sid2": session_id,
        }
        await self._conn.execute(insert_turn, params)
        if consume:
            await self._conn.execute(consume_stmt, {"c_ids": list(consume)})
        return turn

    async def bump_queue_revision(self: SqlTx, session_id: str) -> int:
        value = await self._conn.scalar(bump_stmt, {"q_sid": session_id})
        if value is None:
            raise KeyError(session_id)
        return int(value)

    SqlTx.view = view  # type: ignore[method-assign]
    SqlTx.lock = lock  # type: ignore[method-assign]
    SqlTx.list_entries = list_entries  # type: ignore[method-assign, assignment]
    SqlTx.reserve_head = reserve_head  # type: ignore[method-assign, assignment]
    SqlTx.start_turn = start_turn  # type: ignore[method-assign]
    SqlTx.bump_queue_revision = bump_queue_revision  # type: ignore[method-assign]


# -- multiplex ----------------------------------------------------------------------------------
class PreEncoded(dict[str, Any]):
    """A protocol message whose JSON text is already built (the view's encoder passes it on)."""

    text = ""


class _Group:
    def __init__(self) -> None:
        self.members: dict[Any, None] = {}  # Operation -> None, insertion ordered
        self.last: str | None = None
        self.task: asyncio.Task[None] | None = None


def _frame(operation_id: str, payload: str) -> PreEncoded:
    message = PreEncoded(id=operation_id, type="next")
    message.text = '{"id":' + json.dumps(operation_id) + ',"type":"next","payload":' + payload + "}"
    return message


def install_multiplex() -> None:
    from graphql import FieldNode, OperationDefinitionNode, parse, print_ast
    from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
        BaseGraphQLTransportWSHandler,
    )
    from strawberry.types import ExecutionResult

    from turnqueue.transport import TurnqueueGraphQL

    groups: dict[tuple[str, str, str | None, str | None], _Group] = {}
    normalised: dict[str, str | None] = {}

    def group_key(operation: Any, principal: str | None) -> tuple[str, str, Any, Any] | None:
        query = operation.query
        if query not in normalised:
            try:
                doc = parse(query)
                ops = [d for d in doc.definitions if isinstance(d, OperationDefinitionNode)]
                fields = ops[0].selection_set.selections if len(ops) == 1 else ()
                allowed = (
                    ops
                    and ops[0].operation.value == "subscription"
                    and len(fields) == 1
                    and isinstance(fields[0], FieldNode)
                    and fields[0].name.value == "queueStatusChanged"
                )
                normalised[query] = print_ast(doc) if allowed else None
            except Exception:
                normalised[query] = None
        text = normalised[query]
        if text is None:
            return None
        variables = json.dumps(operation.variables or {}, sort_keys=True)
        return (text, variables, operation.operation_name, principal)

    class MultiplexHandler(BaseGraphQLTransportWSHandler):
        async def run_operation(self, operation: Any) -> None:
            key = group_key(operation, getattr(self.context, "principal", None))
            if key is None:
                await super().run_operation(operation)
                return
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
                group.members[operation] = None
                group.task = asyncio.create_task(self._lead(key, group, operation))
            else:
                group.members[operation] = None
                if group.last is not None:  # replay, no await between join and this send
                    await operation.send_operation_message(_frame(operation.id, group.last))
            try:
                assert group.task is not None
                await asyncio.shield(group.task)
            finally:
                group.members.pop(operation, None)
                if not group.members and groups.get(key) is group:
                    del groups[key]
                    if group.task is not None:
                        group.task.cancel()

        async def _lead(self, key: Any, group: _Group, first: Any) -> None:
            source = await self.schema.stream(
                first.query,
                variable_values=first.variables,
                context_value=self.context,
                root_value=self.root_value,
                operation_name=first.operation_name,
            )
            try:
                async with aclosing(source):
                    async for result in source:
                        if not isinstance(result, ExecutionResult):
                            break
                        payload: dict[str, Any] = {"data": result.data}
                        if result.errors:
                            payload["errors"] = [e.formatted for e in result.errors]
                        group.last = text = json.dumps(payload, separators=(",", ":"))
                        for member in list(group.members):
                            with suppress(Exception):
                                await member.send_operation_message(_frame(member.id, text))
            finally:
                if groups.get(key) is group:
                    del groups[key]
                for member in list(group.members):
                    with suppress(Exception):
                        await member.send_operation_message({"id": member.id, "type": "complete"})

    original_encode = TurnqueueGraphQL.encode_json

    def encode_json(self: Any, data: object) -> str | bytes:
        if isinstance(data, PreEncoded):
            return data.text
        return original_encode(self, data)

    TurnqueueGraphQL.graphql_transport_ws_handler_class = MultiplexHandler  # type: ignore[misc, assignment]
    TurnqueueGraphQL.encode_json = encode_json  # type: ignore[method-assign]
