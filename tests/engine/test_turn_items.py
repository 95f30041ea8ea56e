"""A turn's items (A3) from the durable log (O1) and the turnItems stream's resume (O2, O3), in
process, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, ManualRun, new_session

from turnqueue.api import build_schema
from turnqueue.bus import EventKind, Subscription
from turnqueue.domain import ItemKind, TurnItem, TurnStatus
from turnqueue.engine import Engine
from turnqueue.engine.items import fold_records
from turnqueue.engine.recovery import _recover_session
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.resume import Start
from turnqueue.resolvers.turn_streams import items_stream
from turnqueue.schema import items as gql
from turnqueue.schema.turns import TurnItemsChunk
from turnqueue.timeouts import within


async def _start(engine: Engine, agent: ManualAgent, content: str = "go") -> tuple[str, ManualRun]:
    _, session = await new_session(engine)
    admission = await engine.send_message(PRINCIPAL, session.id, content)
    assert admission.turn is not None
    return session.id, await agent.run_for(admission.turn.id)


def _emit(run: ManualRun, item: TurnItem) -> None:
    run.emit(item)  # type: ignore[arg-type]  # the runner takes text and items alike


def _tool(**data: Any) -> TurnItem:
    return TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "t1", **data}, key="t1")


def _script(run: ManualRun) -> None:
    """Text, a tool call and its updates, a thought, a plan and its update, a raw update."""
    run.emit(" one")
    _emit(run, _tool(title="ls", kind="execute", status="pending"))
    _emit(run, TurnItem(ItemKind.THOUGHT, {"text": "hm"}))
    _emit(run, TurnItem(ItemKind.THOUGHT, {"text": "m"}))
    _emit(run, _tool(status="in_progress"))
    run.emit(" two")
    _emit(run, TurnItem(ItemKind.PLAN, {"entries": [{"content": "a", "status": "pending"}]}))
    _emit(run, _tool(status="completed", content=[{"content": {"type": "text", "text": "ok"}}]))
    _emit(run, TurnItem(ItemKind.RAW, {"sessionUpdate": "usage_update", "used": 3}))
    run.emit(" three")


async def _ended(engine: Engine, session_id: str) -> None:
    runner = engine.core.runners.get(session_id)
    if runner is not None:
        await within(runner.finished.wait(), WAIT)


async def _logged(sub: Subscription, end: int) -> None:
    """Wait until the log holds ``end`` records (their batch committed and was published)."""
    while True:
        event = await within(sub.get(), WAIT)
        if event.batch is not None and event.batch.end >= end:
            return


def _apply(state: dict[int, Any], chunk: TurnItemsChunk) -> None:
    """What a client does with a chunk (TurnItemsChunk's description): append or replace by
    index, text items append their text."""
    for item in chunk.items:
        old = state.get(item.index)
        if isinstance(old, gql.MessageItem | gql.ThoughtItem):
            assert type(old) is type(item)
            old.text += item.text  # type: ignore[union-attr]
        else:
            assert item.index <= len(state)  # never a hole
            state[item.index] = item


def _shown(state: dict[int, Any]) -> list[Any]:
    return [state[i] for i in range(len(state))]


async def _collect(ctx: Context, sid: str, turn_id: str | None, after: int) -> list[Any]:
    out = []
    async for chunk in items_stream(ctx, sid, Start(turn_id, after, follow=turn_id is None)):
        out.append((chunk, ctx.event_id))
        if chunk.done:
            break
    return out


async def _expected(engine: Engine, turn_id: str) -> list[Any]:
    return [gql.item_from_domain(i, it) for i, it in enumerate(await engine.turn_items(turn_id))]


async def test_a3_turn_items_are_folded_from_the_durable_log(
    engine: Engine, agent: ManualAgent, open_engine: Any
) -> None:
    """Turn.items comes from the log: the same on an instance that never ran the turn."""
    sid, run = await _start(engine, agent)
    _script(run)
    run.complete()
    await _ended(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None
    items = await engine.turn_items(turn.id)
    assert [i.kind for i in items] == [
        ItemKind.MESSAGE,
        ItemKind.TOOL_CALL,
        ItemKind.THOUGHT,
        ItemKind.MESSAGE,
        ItemKind.PLAN,
        ItemKind.RAW,
        ItemKind.MESSAGE,
    ]
    assert items[0].data == {"text": "echo:go one"} and items[2].data == {"text": "hmm"}
    assert items[1].data["status"] == "completed" and items[1].data["title"] == "ls"
    assert "".join(str(i.data["text"]) for i in items if i.kind is ItemKind.MESSAGE) == turn.output
    other = await open_engine()  # another instance on the same database: no memory of the turn
    assert await other.turn_items(turn.id) == items
    # Through GraphQL on that instance: Turn.items and a page of Turn.itemsConnection.
    schema = build_schema(other.core.settings)
    query = """query($s: ID!) { session(id: $s) { currentTurn {
      items { index kind ... on ToolCallItem { status } }
      itemsConnection(first: 2, after: null) { edges { node { index kind } }
        pageInfo { hasNextPage } } } } }"""
    context = Context(engine=other, principal=PRINCIPAL)
    result = await schema.execute(query, {"s": sid}, context_value=context)
    assert result.errors is None, result.errors
    assert result.data is not None
    shown = result.data["session"]["currentTurn"]
    assert [i["kind"] for i in shown["items"]] == [i.kind.value for i in items]
    assert shown["items"][1] == {"index": 1, "kind": "TOOL_CALL", "status": "completed"}
    page = shown["itemsConnection"]
    assert [e["node"] for e in page["edges"]] == [
        {"index": 0, "kind": "MESSAGE"},
        {"index": 1, "kind": "TOOL_CALL"},
    ]
    assert page["pageInfo"]["hasNextPage"] is True


async def test_a3_o2_turn_items_stream_resumes_at_every_offset(
    engine: Engine, agent: ManualAgent
) -> None:
    """From 0 the chunks fold to Turn.items; resumed after any chunk's `nextOffset`, the rest
    folds on top of what came before it to the same items: no gap, no duplicate."""
    sid, run = await _start(engine, agent)
    watch = engine.bus.subscribe(sid, [EventKind.ITEMS])
    ctx = Context(engine=engine, principal=PRINCIPAL)
    live = asyncio.create_task(_collect(ctx, sid, run.turn_id, 0))
    _script(run)
    run.complete()
    chunks = await within(live, WAIT)
    watch.close()
    expected = await _expected(engine, run.turn_id)
    state: dict[int, Any] = {}
    for chunk, event_id in chunks:
        _apply(state, chunk)
        done = ":done" if chunk.done else ""  # the turn's end is told apart (O3)
        assert event_id == f"{run.turn_id}:{chunk.next_offset}{done}"  # O3: the SSE id
    assert _shown(state) == expected
    assert chunks[-1][0].done and chunks[-1][0].status is TurnStatus.COMPLETED
    assert [c.offset for c, _ in chunks[1:]] == [c.next_offset for c, _ in chunks[:-1]]
    async with engine.store.read() as tx:
        total = len(await tx.read_records(run.turn_id))
    assert chunks[-1][0].next_offset == total
    for after in range(total + 1):  # every log position, not only chunk ends
        ctx = Context(engine=engine, principal=PRINCIPAL)
        resumed = await within(_collect(ctx, sid, run.turn_id, after), WAIT)
        assert resumed[0][0].offset == after and resumed[-1][0].done
        # The client's state at `after`: the log's first `after` records, folded.
        async with engine.store.read() as tx:
            records = (await tx.read_records(run.turn_id))[:after]
        state = {i: gql.item_from_domain(i, it) for i, it in enumerate(fold_records(records))}
        for chunk, _ in resumed:
            _apply(state, chunk)
        assert _shown(state) == expected, after


async def test_o2_turn_items_resume_closes_the_window_between_the_log_read_and_live(
    engine: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race, forced: a batch commits after the stream subscribed but before its log read
    (in both: sent once), another right after the read (only live: not lost)."""
    sid, run = await _start(engine, agent)
    watch = engine.bus.subscribe(sid, [EventKind.ITEMS])
    await _logged(watch, 1)  # the scripted greeting
    original = engine.records_since

    async def racing_read(session_id: str, turn: str | None, after: int, **kw: Any) -> Any:
        _emit(run, _tool(title="ls", status="pending"))
        await _logged(watch, 2)  # committed and published before the read
        result = await original(session_id, turn, after, **kw)
        _emit(run, _tool(status="completed"))
        await _logged(watch, 3)  # committed and published after the read
        monkeypatch.setattr(engine, "records_since", original)
        run.complete()
        return result

    monkeypatch.setattr(engine, "records_since", racing_read)
    ctx = Context(engine=engine, principal=PRINCIPAL)
    got = await within(_collect(ctx, sid, run.turn_id, 1), WAIT)
    watch.close()
    sent = [(i.index, type(i).__name__) for c, _ in got for i in c.items]
    assert sent == [(1, "ToolCallItem"), (1, "ToolCallItem")]  # each update once, none lost
    assert got[0][0].offset == 1 and got[-1][0].done
    tool = [i for c, _ in got for i in c.items][-1]
    assert isinstance(tool, gql.ToolCallItem) and tool.status == "completed"
    assert tool.title == "ls"  # an update is sent as the whole item, folded
    assert got[-1][1] == f"{run.turn_id}:3:done"


async def test_o2_turn_items_of_a_turn_ended_without_its_runner_end_from_the_log(
    engine: Engine, agent: ManualAgent
) -> None:
    """M6: recovery ends a dead owner's turn and publishes no output; the stream learns it
    from the session event and sends `done` after what the log kept."""
    sid, run = await _start(engine, agent)
    watch = engine.bus.subscribe(sid, [EventKind.ITEMS])
    _emit(run, _tool(title="kept"))
    await _logged(watch, 2)
    watch.close()
    ctx = Context(engine=engine, principal=PRINCIPAL)
    stream = items_stream(ctx, sid, Start(run.turn_id, 0, follow=False))
    first = await within(anext(stream), WAIT)
    assert [type(i).__name__ for i in first.items] == ["MessageItem", "ToolCallItem"]
    runner = engine.core.runners.pop(sid)
    assert runner.log is not None
    await runner.log.detach()
    await _recover_session(
        engine.core,
        sid,
        [run.turn_id],
        [],
        None,
        {engine.core.instance},
    )
    last = await within(anext(stream), WAIT)
    await stream.aclose()
    assert (last.offset, last.next_offset, last.items, last.done) == (2, 2, [], True)
    assert last.status is TurnStatus.FAILED
    run.complete()
    await within(runner.finished.wait(), WAIT)


async def test_o2_turn_items_without_a_turn_id_follow_the_next_turns(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await _start(engine, agent)
    ctx = Context(engine=engine, principal=PRINCIPAL)
    stream = items_stream(ctx, sid, Start(None, 0, follow=True))
    first = await within(anext(stream), WAIT)
    assert first.turn_id == run.turn_id
    run.complete()
    while not (await within(anext(stream), WAIT)).done:
        pass
    admission = await engine.send_message(PRINCIPAL, sid, "again")
    assert admission.turn is not None
    second = await agent.run_for(admission.turn.id)
    _emit(second, TurnItem(ItemKind.PLAN, {"entries": []}))
    second.complete()
    seen: list[Any] = []
    while not seen or not seen[-1].done:
        seen.append(await within(anext(stream), WAIT))
    await stream.aclose()
    assert {c.turn_id for c in seen} == {second.turn_id}
    assert seen[0].offset == 0 and seen[0].items[0].index == 0
    assert [type(i).__name__ for c in seen for i in c.items] == ["MessageItem", "PlanItem"]
