"""O2 for a session-following ``turnOutput`` (no ``turnId``) on an instance that relays another
instance's turns (M4): found by the fleet test (tests/cluster/test_fleet.py).

A following stream starts at the turn current when it reads the log and sends every later turn
from offset 0. Another instance's runtime chunks reach this one over NOTIFY through an outbox,
after the durable notifications of their turn's end and of the next turn's start, so the last
chunk of a turn can arrive after a new stream has read the next turn as current. That chunk is
not part of the stream: sent, it reaches a client at an offset of a turn it never started.
"""

from __future__ import annotations

import asyncio
from typing import Any

from turnqueue.bus import Event, EventKind
from turnqueue.domain import OutputChunk, TurnStatus

TURN_OUTPUT = """subscription($s: ID!) { turnOutput(sessionId: $s) {
  turnId offset text done status } }"""
STATE = "query($s: ID!) { session(id: $s) { state currentTurn { id status } } }"


async def _ended(api: Any, sid: str, content: str) -> str:
    """Send ``content`` and wait (bounded) until its turn has ended; its id."""
    sent = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content=content)
    turn_id: str = sent["turn"]["id"]
    for _ in range(400):  # bounded polling of the scripted turn (0.2 s)
        session = (await api.data(STATE, s=sid))["session"]
        if session["currentTurn"]["id"] == turn_id and session["currentTurn"]["status"] != (
            "RUNNING"
        ):
            return turn_id
        await asyncio.sleep(0.01)
    raise AssertionError("the turn did not end")


async def test_o2_m4_a_following_stream_drops_a_late_relayed_chunk_of_an_earlier_turn(
    api: Any,
) -> None:
    """The fleet saw a fresh following stream on a relaying instance send a ``done`` at offset
    28 of a turn it had never sent (its 28 characters were sent before the stream read the log,
    its ``done`` relayed after). Here the late relayed chunk of the earlier turn is published
    on the bus as the cluster's relay publishes it."""
    sid = await api.create_session()
    earlier = await _ended(api, sid, "one")
    current = await _ended(api, sid, "two")
    async with api.ws() as ws:
        stream = ws.subscribe(TURN_OUTPUT, s=sid)
        snapshot = (await stream.next())["turnOutput"]
        assert snapshot["turnId"] == current and snapshot["offset"] == 0 and snapshot["done"]
        late = OutputChunk(sid, earlier, 28, "", True, TurnStatus.COMPLETED)
        api.engine.bus.publish(Event(EventKind.OUTPUT, sid, chunk=late, relayed=True))
        later = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="three")
        following = (await stream.next())["turnOutput"]
    assert following["turnId"] == later["turn"]["id"], following  # not the earlier turn's end
    assert following["offset"] == 0
