"""Q15: sends with a client's ``clientMessageId`` are idempotent; Q16: a turn records the entry it
started from. Engine level, on both stores; the served tests are tests/ops/test_ops_sends.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, settle
from test_queue_refusals import refusal
from test_queue_rules import busy_session, enqueue

from turnqueue.domain import SendNowScope, SendOutcome
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode


async def test_q15_a_retried_send_that_started_a_turn_answers_the_same_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    first = await engine.send_message(PRINCIPAL, session.id, "hello", "key-1")
    again = await engine.send_message(PRINCIPAL, session.id, "hello", "key-1")
    assert first.turn is not None and again.turn is not None
    assert again.turn.id == first.turn.id and again.entry is None
    assert first.turn.client_message_id == "key-1"
    run = await agent.next_run()
    assert agent.no_new_run()  # one turn, never a second
    run.complete()
    await settle(engine, session.id)
    later = await engine.send_message(PRINCIPAL, session.id, "hello", "key-1")  # after its end
    assert later.turn is not None and later.turn.id == first.turn.id
    assert [t.prompt for t in await engine.turns_of(session.id, 10)] == ["hello"]
    assert agent.no_new_run()


async def test_q15_a_retried_send_that_queued_answers_the_same_entry_even_after_it_ran(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15, Q16: the retry of a queued send answers its entry (while queued, as it is; once it
    ran, as it was queued), and the turn the entry became carries the key and the entry."""
    sid, run = await busy_session(engine, agent)
    queued = await engine.send_message(PRINCIPAL, sid, "later", "key-2")
    assert queued.entry is not None and queued.entry.client_message_id == "key-2"
    again = await engine.send_message(PRINCIPAL, sid, "later", "key-2")
    assert again.entry == queued.entry and again.turn is None
    assert [e.content for e in (await engine.queue_status(sid)).entries] == ["later"]
    run.complete()
    became = await agent.next_run()
    assert became.prompt == "later"
    turn = await engine.current_turn(sid)
    assert turn is not None
    assert (turn.client_message_id, turn.entry_id) == ("key-2", queued.entry.id)
    retried = await engine.send_message(PRINCIPAL, sid, "later", "key-2")
    assert retried.entry is not None and retried.entry.id == queued.entry.id
    assert (await engine.queue_status(sid)).entries == ()  # not queued again
    assert agent.no_new_run()


async def test_q15_an_enqueue_retried_after_a_restart_queues_nothing_more(
    engine: Engine, open_engine: Any, agent: ManualAgent
) -> None:
    sid, _ = await busy_session(engine, agent)
    entry, turn, _ = await engine.enqueue(PRINCIPAL, sid, "queued once", None, "key-3")
    assert turn is None and entry.client_message_id == "key-3"
    await engine.set_auto_run(PRINCIPAL, sid, False, None)  # it stays queued over the restart
    await engine.aclose()  # a restart: the key is durable
    restarted = await open_engine(agent_=ManualAgent())
    again, again_turn, _ = await restarted.enqueue(PRINCIPAL, sid, "queued once", None, "key-3")
    assert again.id == entry.id and again_turn is None
    status = await restarted.queue_status(sid)
    assert [e.id for e in status.entries] == [entry.id]


async def test_q15_an_enqueue_retried_after_its_drain_started_a_turn_answers_that_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15: an enqueue on a free session queues and its automatic drain starts the entry at
    once (Q3). Its retry answers the same entry and the same turn, and a sendMessage with the
    key answers the enqueue's outcome (QUEUED) with both; nothing runs twice."""
    _, session = await new_session(engine)
    entry, turn, _ = await engine.enqueue(PRINCIPAL, session.id, "at once", None, "key-e")
    assert turn is not None
    run = await agent.next_run()
    again_entry, again_turn, _ = await engine.enqueue(
        PRINCIPAL, session.id, "at once", None, "key-e"
    )
    assert again_entry.id == entry.id
    assert again_turn is not None and again_turn.id == turn.id
    sent = await engine.send_message(PRINCIPAL, session.id, "at once", "key-e")
    assert sent.outcome is SendOutcome.QUEUED
    assert sent.entry is not None and sent.entry.id == entry.id
    assert sent.turn is not None and sent.turn.id == turn.id
    assert agent.no_new_run()
    run.complete()


async def test_q15_an_enqueue_with_the_key_of_a_send_that_started_a_turn_is_a_conflict(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15: a sendMessage that started a turn queued nothing, so an enqueueMessage with its key
    has no entry to answer with: IDEMPOTENCY_CONFLICT on the key, and nothing is queued."""
    _, session = await new_session(engine)
    sent = await engine.send_message(PRINCIPAL, session.id, "go", "key-s")
    assert sent.turn is not None
    run = await agent.next_run()
    before = await engine.queue_status(session.id)
    assert await refusal(engine.enqueue(PRINCIPAL, session.id, "go", None, "key-s")) == (
        ErrorCode.IDEMPOTENCY_CONFLICT,
        "clientMessageId 'key-s' started a turn: it queued nothing to answer with",
        ["clientMessageId"],
    )
    assert await engine.queue_status(session.id) == before
    run.complete()


async def test_q15_q16_a_send_now_of_one_entry_starts_a_turn_that_carries_its_entry_and_key(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15, Q16: Send Now of one keyed entry starts a turn that records that entry and carries
    its key; a Send Now of two entries runs them as one prompt, which comes from no one entry."""
    sid, run = await busy_session(engine, agent)
    entry, _, _ = await engine.enqueue(PRINCIPAL, sid, "now", None, "key-now")
    one = await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry.id, None)
    assert one.turn is not None
    assert (one.turn.entry_id, one.turn.client_message_id) == (entry.id, "key-now")
    assert run.signals  # the running turn was stopped
    run = await agent.next_run()
    for content, key in (("a", "key-a"), ("b", "key-b")):
        await engine.enqueue(PRINCIPAL, sid, content, None, key)
    both = await engine.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, None)
    assert both.turn is not None and both.sent_count == 2
    assert (both.turn.prompt, both.turn.entry_id, both.turn.client_message_id) == (
        "a\n\nb",
        None,
        None,
    )
    (await agent.next_run()).complete()


async def test_q15_the_same_key_with_other_content_is_a_conflict_and_changes_nothing(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, _ = await busy_session(engine, agent)
    await engine.send_message(PRINCIPAL, sid, "one text", "key-4")
    before = await engine.queue_status(sid)
    for attempt in (
        engine.send_message(PRINCIPAL, sid, "another text", "key-4"),
        engine.enqueue(PRINCIPAL, sid, "another text", None, "key-4"),
    ):
        code, _, field = await refusal(attempt)
        assert (code, field) == (ErrorCode.IDEMPOTENCY_CONFLICT, ["clientMessageId"])
    assert await engine.queue_status(sid) == before  # the same revision: nothing changed


async def test_q15_two_sends_racing_with_one_key_run_once(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15: the second of two racing sends reads, under the session's lock row, what the
    first committed; both answer one turn (free session) or one entry (busy session)."""
    _, session = await new_session(engine)
    answers = await asyncio.gather(
        *(engine.send_message(PRINCIPAL, session.id, "racing", "key-5") for _ in range(5))
    )
    assert len({a.turn.id for a in answers if a.turn is not None}) == 1
    assert all(a.entry is None for a in answers)
    await agent.next_run()
    assert agent.no_new_run()
    queued = await asyncio.gather(
        *(engine.enqueue(PRINCIPAL, session.id, "racing too", None, "key-6") for _ in range(5))
    )
    assert len({entry.id for entry, _, _ in queued}) == 1
    assert [e.content for e in (await engine.queue_status(session.id)).entries] == ["racing too"]


@pytest.mark.parametrize("key", ["", " ", "x" * 129, "a\x00b"])
async def test_q15_a_malformed_key_is_invalid_input_and_changes_nothing(
    engine: Engine, agent: ManualAgent, key: str
) -> None:
    sid, _ = await busy_session(engine, agent)
    before = await engine.queue_status(sid)
    for attempt in (
        engine.send_message(PRINCIPAL, sid, "x", key),
        engine.enqueue(PRINCIPAL, sid, "x", None, key),
    ):
        code, _, field = await refusal(attempt)
        assert (code, field) == (ErrorCode.INVALID_INPUT, ["clientMessageId"])
    assert await engine.queue_status(sid) == before


async def test_q15_keys_are_per_session(engine: Engine, agent: ManualAgent) -> None:
    """Q15: a key names a send of one session: the same key in another session is another
    message."""
    sid_a, _ = await busy_session(engine, agent)
    sid_b, _ = await busy_session(engine, agent)
    a = await engine.send_message(PRINCIPAL, sid_a, "same", "key-7")
    b = await engine.send_message(PRINCIPAL, sid_b, "same", "key-7")
    assert a.entry is not None and b.entry is not None and a.entry.id != b.entry.id


async def test_q15_a_key_is_kept_a_day_and_forgotten_after(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15: a key is answered for at least 24 hours; a session's older keys are forgotten with
    its next keyed send (so they do not pile up)."""
    from datetime import timedelta

    from turnqueue.store import requests as requests_module

    sid, _ = await busy_session(engine, agent)
    first = await engine.send_message(PRINCIPAL, sid, "old", "key-8")
    assert first.entry is not None
    async with engine.store.transaction() as tx:  # as if the key were 25 hours old
        from sqlalchemy import update

        from turnqueue.domain import utcnow
        from turnqueue.store.tables import sent_messages

        await tx.fetch(  # type: ignore[attr-defined]
            update(sent_messages)
            .where(sent_messages.c.key == "key-8")
            .values(created_at=utcnow() - requests_module.KEPT - timedelta(hours=1))
            .returning(sent_messages.c.key)
        )
    await engine.send_message(PRINCIPAL, sid, "new", "key-9")  # prunes the session's old keys
    again = await engine.send_message(PRINCIPAL, sid, "old", "key-8")
    assert again.entry is not None and again.entry.id != first.entry.id  # a new message now


async def test_q15_m4_a_retry_on_another_instance_answers_the_first_send(
    database_url: str, open_engine: Any, agent: ManualAgent
) -> None:
    """Q15, M4: a send through A and its retry through B (racing, then again) answer one entry."""
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share a database only on PostgreSQL (M4)")
    a = await open_engine()
    b = await open_engine(agent_=ManualAgent())
    sid, _ = await busy_session(a, agent)
    answers = await asyncio.gather(
        a.send_message(PRINCIPAL, sid, "once", "key-m4"),
        b.send_message(PRINCIPAL, sid, "once", "key-m4"),
    )
    again = await b.send_message(PRINCIPAL, sid, "once", "key-m4")
    ids = {x.entry.id for x in (*answers, again) if x.entry is not None}
    assert len(ids) == 1
    assert [e.content for e in (await b.queue_status(sid)).entries] == ["once"]


async def test_q15_a_retry_after_the_entry_ran_answers_it_as_it_was_queued(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15: once a keyed send's entry has run it is no longer in the queue; a retry answers
    it as it was queued: its place in the queue then (not the head) and when it was queued."""
    sid, run = await busy_session(engine, agent)
    await engine.send_message(PRINCIPAL, sid, "ahead")
    queued = await engine.send_message(PRINCIPAL, sid, "behind", "key-q")
    assert queued.entry is not None and queued.entry.position > 1
    run.complete()
    (await agent.next_run()).complete()  # "ahead"
    became = await agent.next_run()
    assert became.prompt == "behind"
    assert (await engine.queue_status(sid)).entries == ()
    retried = await engine.send_message(PRINCIPAL, sid, "behind", "key-q")
    assert retried.outcome is SendOutcome.QUEUED and retried.turn is None
    assert retried.entry == queued.entry
    assert agent.no_new_run()
    became.complete()


async def test_q15_s3_a_retry_with_content_that_cannot_be_stored_is_refused_as_input(
    engine: Engine, agent: ManualAgent
) -> None:
    """S3 before Q15: a retry of a keyed send with a lone surrogate (which no store can keep)
    is INVALID_INPUT on its content, checked before the key is looked up; other content that
    can be stored is IDEMPOTENCY_CONFLICT. Neither changes anything."""
    sid, _ = await busy_session(engine, agent)
    await engine.send_message(PRINCIPAL, sid, "stored", "key-u")
    before = await engine.queue_status(sid)
    assert await refusal(engine.send_message(PRINCIPAL, sid, "half \ud800", "key-u")) == (
        ErrorCode.INVALID_INPUT,
        "content must be valid Unicode (it holds a lone surrogate)",
        ["content"],
    )
    assert await refusal(engine.send_message(PRINCIPAL, sid, "other", "key-u")) == (
        ErrorCode.IDEMPOTENCY_CONFLICT,
        "clientMessageId 'key-u' was already sent in this session with other content",
        ["clientMessageId"],
    )
    assert await engine.queue_status(sid) == before


async def test_q15_a_retry_while_the_entry_waits_answers_it_as_it_is_now(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q15, Q12: while a keyed send's entry is queued, a retry (with the content first sent)
    answers the entry as it is now: edited and moved since, not as it was queued."""
    sid, run = await busy_session(engine, agent)
    queued = await engine.send_message(PRINCIPAL, sid, "as sent", "key-n")
    assert queued.entry is not None
    (ahead,) = await enqueue(engine, sid, "ahead")
    await engine.update_entry(PRINCIPAL, sid, queued.entry.id, "as edited", None)
    status = await engine.reorder_queue(PRINCIPAL, sid, [ahead, queued.entry.id], None)
    now = status.entries[1]
    assert (now.id, now.content) == (queued.entry.id, "as edited") and now != queued.entry
    retried = await engine.send_message(PRINCIPAL, sid, "as sent", "key-n")
    assert retried.outcome is SendOutcome.QUEUED and retried.entry == now
    assert [e.id for e in (await engine.queue_status(sid)).entries] == [ahead, queued.entry.id]
    run.complete()
