"""M6 after a false death, found by the fleet test (tests/cluster/test_fleet.py): an instance
declared dead while merely slow (its heartbeat late by more than a lease on a loaded machine)
has its running turn ended ``FAILED`` by another instance's recovery, yet keeps running it.
Nobody deletes its instance row then, so its next heartbeat succeeds and it never learns.

When its agent finishes, the turn's end finds the turn already ended (``end_turn`` is
idempotent: the database keeps the recovery's end). The end it publishes must be the one the
database recorded: in the fleet, the slow owner published ``done`` with ``COMPLETED`` to its own
subscribers while every other instance, and every read, said ``FAILED`` — an uninterrupted
client ended with another state than the truth.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session
from test_cancellation_rules import _pg_only

from turnqueue.bus import EventKind
from turnqueue.domain import TurnStatus
from turnqueue.engine.recovery import recover
from turnqueue.timeouts import within


async def test_m6_c8_an_owner_declared_dead_while_slow_publishes_the_end_the_database_kept(
    database_url: str, engine_settings: Any, open_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """M6, and A11 on the slow owner: it logs the end the database kept, with its reason."""
    _pg_only(database_url)
    slow = engine_settings.model_copy(update={"lease_seconds": 120})  # no heartbeat recovery
    agent_a = ManualAgent()
    a = await open_engine(slow, agent_=agent_a)
    b = await open_engine(slow)
    _, session = await new_session(a)
    sid = session.id
    sent = await a.send_message(PRINCIPAL, sid, "work")
    run = await agent_a.next_run()
    with (
        a.bus.subscribe(sid, [EventKind.OUTPUT]) as sub,
        caplog.at_level("INFO", logger="turnqueue.engine.turns"),
    ):
        # B found A's heartbeat older than a lease: a false death. A's turn is recovered.
        await recover(b.core, b.turns, sweep=False, live={b.core.instance})
        run.complete()  # A's agent answers after all
        while not (event := await within(sub.get(), 10)).chunk or not (event.chunk.done):
            pass
    assert sent.turn is not None
    turn = await a.turn(sent.turn.id)
    assert turn is not None and turn.status is TurnStatus.FAILED  # the recovery's end stands
    assert event.chunk is not None
    assert event.chunk.status is turn.status  # the end A publishes is the one recorded
    assert event.chunk.offset == len(turn.output)
    logged = [r.getMessage() for r in caplog.records if r.name == "turnqueue.engine.turns"]
    assert logged == [f"turn {turn.id} ended FAILED: {turn.error}"] and turn.error
