"""Races as real concurrency: many iterations with randomised interleavings (Q3, Q5)."""

from __future__ import annotations

import asyncio
import random

from engine_helpers import PRINCIPAL, ManualAgent, drive_to_idle, new_session, settle

from turnqueue.domain import SendNowScope, TurnStatus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError

ITERATIONS = 40


async def jitter(rng: random.Random) -> None:
    for _ in range(rng.randrange(6)):
        await asyncio.sleep(0)


async def test_q3_off_racing_a_turn_end_never_starts_more_than_the_already_reserved_entry(
    engine: Engine, agent: ManualAgent
) -> None:
    rng = random.Random(1)
    outcomes = {"off_first": 0, "reservation_first": 0}
    for _ in range(ITERATIONS):
        _, session = await new_session(engine)
        sid = session.id
        await engine.send_message(PRINCIPAL, sid, "active")
        run = await agent.next_run()
        for content in ("B", "C"):
            await engine.enqueue(PRINCIPAL, sid, content, None)

        async def off() -> None:
            await jitter(rng)
            await engine.set_auto_run(PRINCIPAL, sid, False, None)

        async def end() -> None:
            await jitter(rng)
            run.complete()

        await asyncio.gather(off(), end())
        await settle(engine, sid)
        if agent.no_new_run():
            outcomes["off_first"] += 1
            remaining = ["B", "C"]
        else:
            # The reservation committed first: B may run, OFF applies to every later entry.
            outcomes["reservation_first"] += 1
            successor = await agent.next_run()
            assert successor.prompt == "B"
            successor.complete()
            await settle(engine, sid)
            remaining = ["C"]
        assert agent.no_new_run()
        status = await engine.queue_status(sid)
        assert status.auto_run is False
        assert [e.content for e in status.entries] == remaining
    assert sum(outcomes.values()) == ITERATIONS


async def test_q5_send_now_racing_a_fifo_drain_loses_and_duplicates_nothing(
    engine: Engine, agent: ManualAgent
) -> None:
    rng = random.Random(2)
    for _ in range(ITERATIONS // 2):
        _, session = await new_session(engine)
        sid = session.id
        await engine.send_message(PRINCIPAL, sid, "active")
        run = await agent.next_run()
        _, b = [
            (await engine.enqueue(PRINCIPAL, sid, content, None))[0].id for content in ("A", "B")
        ]

        async def send_now() -> str:
            await jitter(rng)
            try:
                await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, b, None)
            except UserFacingError as error:
                assert error.code is ErrorCode.TURN_CHANGED
                return "turn_changed"
            return "sent"

        async def end() -> None:
            await jitter(rng)
            run.complete()

        outcome, _ = await asyncio.gather(send_now(), end())
        prompts = await drive_to_idle(engine, agent, sid)
        assert agent.no_new_run()
        assert (await engine.queue_status(sid)).entries == ()
        # Every entry became exactly one turn (a Send Now may have replaced A's turn, which
        # then ended CANCELLED: its prompt is kept in that turn, not lost).
        turns = [t for t in await engine.turns_of(sid, 10) if t.prompt != "active"]
        assert sorted(t.prompt for t in turns) == ["A", "B"], (outcome, turns)
        completed = [t.prompt for t in turns if t.status is TurnStatus.COMPLETED]
        assert completed == [p for p in prompts if p in completed]
        if outcome == "sent":
            assert completed[0] == "B"  # the Send Now entry ran first
