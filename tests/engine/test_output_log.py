"""The durable output log (O1) and resuming from it (O2), in process, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, ManualRun, new_session
from faults import faults_of

from turnqueue.bus import EventKind, Subscription
from turnqueue.domain import ItemKind, OutputChunk, TurnItem, TurnStatus
from turnqueue.engine import Engine, outputlog
from turnqueue.engine.recovery import _recover_session
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.resume import Start
from turnqueue.resolvers.turn_streams import output_stream
from turnqueue.timeouts import within


async def _start(engine: Engine, agent: ManualAgent, content: str = "go") -> tuple[str, ManualRun]:
    _, session = await new_session(engine)
    admission = await engine.send_message(PRINCIPAL, session.id, content)
    assert admission.turn is not None
    return session.id, await agent.run_for(admission.turn.id)


async def _published(sub: Subscription, text: str) -> OutputChunk:
    """Wait until a chunk ending with ``text`` is published (its batch has committed)."""
    while True:
        event = await within(sub.get(), WAIT)
        chunk = event.chunk
        if chunk is not None and (chunk.text.endswith(text) or chunk.done):
            return chunk


async def _ended(engine: Engine, session_id: str) -> None:
    runner = engine.core.runners.get(session_id)
    if runner is not None:
        await within(runner.finished.wait(), WAIT)


async def test_o1_every_chunk_and_item_is_logged_in_order_and_output_matches(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await _start(engine, agent)
    tool = {"toolCallId": "t1", "title": "ls", "kind": "execute", "status": "pending"}
    run.emit("one ")
    run.emit(TurnItem(ItemKind.TOOL_CALL, tool, key="t1"))  # type: ignore[arg-type]
    run.emit("two ")
    run.emit(TurnItem(ItemKind.MESSAGE, {"text": "three"}))  # type: ignore[arg-type]
    run.emit(TurnItem(ItemKind.PLAN, {"entries": [{"content": "x"}]}))  # type: ignore[arg-type]
    run.complete()
    await _ended(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.COMPLETED
    async with engine.store.read() as tx:
        records = await tx.read_records(turn.id)
        text = await tx.output_text(turn.id)
    assert [r.seq for r in records] == list(range(len(records)))
    # Text that follows text within one batch is one record: compare with runs collapsed.
    kinds = [
        k for i, k in enumerate(r.kind for r in records) if i == 0 or records[i - 1].kind is not k
    ]
    assert kinds == [ItemKind.MESSAGE, ItemKind.TOOL_CALL, ItemKind.MESSAGE, ItemKind.PLAN]
    tool_call = next(r for r in records if r.kind is ItemKind.TOOL_CALL)
    plan = next(r for r in records if r.kind is ItemKind.PLAN)
    assert tool_call.data == tool and tool_call.key == "t1" and tool_call.offset == 11
    assert plan.data == {"entries": [{"content": "x"}]} and plan.offset == 20
    assert text == turn.output == "echo:goone two three"
    messages = [r for r in records if r.kind is ItemKind.MESSAGE]
    assert [r.offset for r in messages] == [
        sum(len(m.text) for m in messages[:i]) for i in range(len(messages))
    ]


async def test_o1_done_follows_every_chunk_and_chunks_are_batched(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await _start(engine, agent)
    sub = engine.bus.subscribe(sid, [EventKind.OUTPUT])
    try:
        for i in range(300):  # all at once: far more than one batch
            run.emit(f"{i},")
        run.complete()
        chunks: list[OutputChunk] = []
        while not (chunks and chunks[-1].done):
            event = await within(sub.get(), WAIT)
            assert event.chunk is not None
            chunks.append(event.chunk)
    finally:
        sub.close()
    text = "".join(c.text for c in chunks)
    assert text == "echo:go" + "".join(f"{i}," for i in range(300))
    assert [c.offset for c in chunks] == [
        sum(len(c.text) for c in chunks[:i]) for i in range(len(chunks))
    ]
    assert chunks[-1].offset == len(text) and chunks[-1].status is TurnStatus.COMPLETED
    # Batched: one published chunk per committed batch, far fewer than the 301 pieces.
    assert len(chunks) - 1 <= 301 // outputlog.MAX_BATCH + 2


async def test_o1_an_ended_turns_log_never_grows(engine: Engine, agent: ManualAgent) -> None:
    sid, run = await _start(engine, agent)
    run.complete()
    await _ended(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None
    late = outputlog.OutputRecord(turn.id, 99, 0, ItemKind.MESSAGE, "late")
    async with engine.store.transaction() as tx:
        assert await tx.append_output({turn.id: [late]}) == {turn.id}
    async with engine.store.read() as tx:
        assert await tx.output_text(turn.id) == "echo:go"


def _stream(ctx: Context, sid: str, turn_id: str, after: int) -> AsyncGenerator[Any, None]:
    """turnOutput's stream of ``turn_id`` after ``after`` (its resolver's, without GraphQL)."""
    return output_stream(ctx, sid, Start(turn_id, after, follow=False))


async def _transcript(ctx: Context, sid: str, turn_id: str, after: int) -> list[Any]:
    out = []
    async for chunk in _stream(ctx, sid, turn_id, after):
        out.append((chunk.offset, chunk.text, chunk.done, ctx.event_id))
        if chunk.done:
            break
    return out


async def test_o2_resume_closes_the_window_between_the_log_read_and_the_live_stream(
    engine: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race, forced: one chunk commits while the stream is subscribed but before its log
    read (it is in both: sent once), another right after the read (only live: not lost)."""
    sid, run = await _start(engine, agent)
    watch = engine.bus.subscribe(sid, [EventKind.OUTPUT])
    await _published(watch, "echo:go")
    original = engine.output_since
    turn_id = run.turn_id

    async def racing_read(session_id: str, turn: str | None, after: int, **kw: Any) -> Any:
        run.emit("B")
        await _published(watch, "B")  # committed and published before the read
        result = await original(session_id, turn, after, **kw)
        run.emit("C")
        await _published(watch, "C")  # committed and published after the read
        monkeypatch.setattr(engine, "output_since", original)
        run.complete()
        return result

    monkeypatch.setattr(engine, "output_since", racing_read)
    ctx = Context(engine=engine, principal=PRINCIPAL)
    got = await within(_transcript(ctx, sid, turn_id, 3), WAIT)
    watch.close()
    assert "".join(text for _, text, _, _ in got) == "o:goBC"
    assert got[0][0] == 3
    assert [o for o, *_ in got] == [
        3 + sum(len(t) for _, t, _, _ in got[:i]) for i in range(len(got))
    ]
    assert got[-1][2] is True
    assert got[-1][3] == f"{turn_id}:{len('echo:goBC')}:done"  # the SSE id: where to resume


async def test_o2_resume_of_an_ended_turn_replays_from_the_log_and_ends(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await _start(engine, agent)
    run.emit("-more")
    run.complete()
    await _ended(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None
    ctx = Context(engine=engine, principal=PRINCIPAL)
    for after in (0, 4, len("echo:go-more"), 1000):
        got = await within(_transcript(ctx, sid, turn.id, after), WAIT)
        expected = "echo:go-more"[after:]
        assert got == [(min(after, 12), expected, True, f"{turn.id}:12:done")]


async def test_o2_refuses_a_negative_offset_and_a_foreign_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await _start(engine, agent)
    other, _ = await _start(engine, agent, "other")
    with pytest.raises(InvalidInput):
        await engine.check_output_request(sid, None, -1)
    with pytest.raises(NotFound):
        await engine.check_output_request(other, run.turn_id, 0)
    await engine.check_output_request(sid, run.turn_id, 0)


async def test_o2_a_turn_ended_without_its_runner_sends_done_from_the_log(
    engine: Engine, agent: ManualAgent
) -> None:
    """M6: a turn whose owner died is ended by recovery, which publishes no output chunk; the
    stream learns it from the session event and sends ``done`` with what the log kept."""
    sid, run = await _start(engine, agent)
    watch = engine.bus.subscribe(sid, [EventKind.OUTPUT])
    run.emit("-kept")
    await _published(watch, "-kept")
    watch.close()
    ctx = Context(engine=engine, principal=PRINCIPAL)
    stream = _stream(ctx, sid, run.turn_id, 0)
    first = await within(anext(stream), WAIT)
    assert first.text == "echo:go-kept" and not first.done
    # What recovery does for a dead owner's turn, without the runner (detached first).
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
    assert (last.offset, last.text, last.done, last.status) == (12, "", True, TurnStatus.FAILED)
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.output == "echo:go-kept"
    run.complete()  # the old runner's late end changes nothing
    await within(runner.finished.wait(), WAIT)
    assert await engine.current_turn(sid) == turn


async def test_o1_running_turns_share_one_write(
    engine: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One flusher per process: the pending batches of every running turn go in one
    transaction (SQLite has one writer), each published after it commits."""
    monkeypatch.setattr(outputlog, "FLUSH_SECONDS", 60.0)  # the test starts the write itself
    started = [await _start(engine, agent, f"turn {i}") for i in range(3)]
    watches = [engine.bus.subscribe(sid, [EventKind.OUTPUT]) for sid, _ in started]
    logs = [engine.core.runners[sid].log for sid, _ in started]
    for _, run in started:
        run.emit("-shared")
    for _ in range(1000):  # bounded: the runner tasks add the chunks on their next steps
        if all(o.text.endswith("-shared") for o in logs):
            break
        await asyncio.sleep(0)
    writes: list[int] = []

    async def counting(batches: dict[str, Any]) -> None:
        writes.append(len(batches))

    with faults_of(engine).before("append_output", counting):
        outputlog.flusher_of(engine.store).want(logs[0], full=True)  # a full batch: write now
        for watch in watches:
            await _published(watch, "-shared")
            watch.close()
    assert writes == [3]
    for _, run in started:
        run.complete()
    for sid, _ in started:
        await _ended(engine, sid)
