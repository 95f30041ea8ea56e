"""Q16: steering — a message offered to the running turn is taken by it (a STEER item) or queued
as enqueueMessage would queue it; never lost, never delivered twice, never both. Engine level,
on both stores; through the real server in tests/ops/test_ops_sends.py and
tests/agents/test_acp_served.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, settle
from test_cancellation_rules import _pg_only, crash

from turnqueue.domain import ItemKind, SendOutcome, TurnStatus
from turnqueue.engine import Engine
from turnqueue.timeouts import within


async def running(engine: Engine, agent: ManualAgent, prompt: str) -> tuple[str, Any]:
    _, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, prompt)
    return session.id, await agent.next_run()


async def steer(engine: Engine, sid: str, text: str, key: str | None = None) -> Any:
    return await engine.send_message(PRINCIPAL, sid, text, key, steer=True)


async def test_q16_a_steered_message_becomes_part_of_the_running_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await running(engine, agent, "/steerable work")
    answer = await steer(engine, sid, "also check the tests")
    assert answer.outcome is SendOutcome.STEERED and answer.entry is None
    assert answer.turn is not None and answer.turn.id == run.turn_id
    assert run.steered == ["also check the tests"]
    assert (await engine.queue_status(sid)).entries == ()  # not queued as well
    run.complete()
    await settle(engine, sid)
    items = await engine.turn_items(run.turn_id)
    steered = [i for i in items if i.kind is ItemKind.STEER]
    assert [i.data["text"] for i in steered] == ["also check the tests"]
    assert agent.no_new_run()  # never delivered twice: no turn of its own


async def test_q16_an_agent_that_does_not_steer_queues_it_at_the_tail(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await running(engine, agent, "plain work")
    await engine.enqueue(PRINCIPAL, sid, "first in line", None)
    answer = await steer(engine, sid, "steer me")
    assert answer.outcome is SendOutcome.QUEUED and answer.entry is not None
    queued = [e.content for e in (await engine.queue_status(sid)).entries]
    assert queued == ["first in line", "steer me"]  # as enqueueMessage would: at the tail
    run.complete()
    assert (await agent.next_run()).prompt == "first in line"


async def test_q16_with_no_turn_running_a_steer_starts_a_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    answer = await steer(engine, session.id, "go")
    assert answer.outcome is SendOutcome.STARTED and answer.turn is not None
    assert (await agent.next_run()).prompt == "go"


async def test_q15_q16_a_retried_steer_answers_the_first_outcome(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await running(engine, agent, "/steerable work")
    first = await steer(engine, sid, "once", "key-s")
    again = await steer(engine, sid, "once", "key-s")
    assert first.outcome is again.outcome is SendOutcome.STEERED
    assert again.turn is not None and again.turn.id == run.turn_id
    assert run.steered == ["once"]


async def test_q16_a_steer_racing_the_turns_end_is_steered_or_queued_never_both(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q16: the turn may end while the message is offered: either the turn took it (and it is
    not queued) or it did not (and it runs after as a turn of its own) — never both, never
    neither, whichever wins the race."""
    for _ in range(8):
        sid, run = await running(engine, agent, "/steerable work")
        answer, _ = await asyncio.gather(steer(engine, sid, "racing"), _complete(run))
        await settle(engine, sid)
        steered = "racing" in run.steered
        queued = [e.content for e in (await engine.queue_status(sid)).entries]
        ran = [t.prompt for t in await engine.turns_of(sid, 5)].count("racing")
        assert steered + len(queued) + ran == 1, (answer.outcome, steered, queued, ran)
        if steered:
            assert answer.outcome is SendOutcome.STEERED
        elif queued:
            assert answer.outcome is SendOutcome.QUEUED
        else:  # queued when decided, and started by the end's drain right after (or before)
            assert answer.outcome in (SendOutcome.QUEUED, SendOutcome.STARTED)
        while not agent.no_new_run():
            (await agent.next_run()).complete()


async def _complete(run: Any) -> None:
    await asyncio.sleep(0)
    run.complete()


async def test_q16_m4_a_steer_sent_to_another_instance_reaches_the_turn(
    database_url: str, open_engine: Any, agent: ManualAgent
) -> None:
    """Q16, M4: B writes the request; A, which runs the turn, reacts to it (NOTIFY) and the
    agent takes the message; B answers STEERED."""
    _pg_only(database_url)
    a = await open_engine()
    b = await open_engine(agent_=ManualAgent())
    sid, run = await running(a, agent, "/steerable work")
    answer = await within(steer(b, sid, "through B"), WAIT)
    assert answer.outcome is SendOutcome.STEERED and run.steered == ["through B"]
    assert (await b.queue_status(sid)).entries == ()


async def test_q16_m6_a_steer_whose_turn_died_stays_queued(
    database_url: str, engine_settings: Any, open_engine: Any, agent: ManualAgent
) -> None:
    """Q16, M6: the instance running the turn dies before it decides the request; once its
    turn is recovered (ended), the requester decides QUEUED and the message waits in the
    queue (then runs, as any queued message)."""
    _pg_only(database_url)
    a = await open_engine(engine_settings.model_copy(update={"lease_seconds": 1.0}))
    other = ManualAgent()
    b = await open_engine(engine_settings.model_copy(update={"lease_seconds": 1.0}), other)
    sid, _ = await running(a, agent, "/steerable work")
    await crash(a)  # A stops reacting: its runner, and its turn, are gone with it
    answer = await within(steer(b, sid, "orphaned"), WAIT * 3)
    assert answer.outcome in (SendOutcome.QUEUED, SendOutcome.STARTED)
    # Queued or started at once, it runs once, on the live instance (the recovery's drain
    # may start it at any moment after the answer: wait for that rather than read around it).
    assert (await other.next_run()).prompt == "orphaned"
    turns = await b.turns_of(sid, 5)
    assert [(t.prompt, t.status) for t in turns] == [
        ("/steerable work", TurnStatus.FAILED),  # recovered: interrupted
        ("orphaned", TurnStatus.RUNNING),
    ]
    assert (await b.queue_status(sid)).entries == ()
    for run in agent.runs:
        run.fail("process died")


@pytest.mark.parametrize("key", [None, "k"])
async def test_q16_a_refused_steer_changes_only_the_queue(
    engine: Engine, agent: ManualAgent, key: str | None
) -> None:
    """Q16, Q11: a steer into a full queue is QUEUE_FULL and changes nothing."""
    sid, _ = await running(engine, agent, "/steerable work")
    for i in range(engine.core.settings.queue_limit or 0):
        await engine.enqueue(PRINCIPAL, sid, f"e{i}", None)
    before = await engine.queue_status(sid)
    from test_queue_refusals import refusal

    code, _, _ = await refusal(steer(engine, sid, "one too many", key))
    assert code.value == "QUEUE_FULL"
    assert await engine.queue_status(sid) == before
