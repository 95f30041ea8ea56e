"""Q15 (idempotent sends) and Q16 (a turn's entry) through the real server process
(``python -m turnqueue serve``, uvloop), on SQLite and PostgreSQL: a client that loses the
answer and sends again — at once, racing, and after the server restarted — gets the first
send's outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import ProcServer

SEND = "turn { id clientMessageId } queuedEntry { id clientMessageId } userErrors { code field }"
ENQUEUE = "entry { id clientMessageId } dispatched userErrors { code field }"
TURNS = """query($s: ID!) { session(id: $s) { queue { entries { id content clientMessageId } }
  turnsConnection(last: 20) { edges { node { prompt status clientMessageId queueEntryId } } } } }"""


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[ProcServer]:
    server = ProcServer(
        database_url,
        tmp_path / "server.log",
        TURNQUEUE_SCRIPTED_TURN_SECONDS="30",  # the first turn stays busy: the rest queue
        TURNQUEUE_LEASE_SECONDS="10",
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_q15_q16_served_retries_race_and_survive_a_restart(served: ProcServer) -> None:
    async with served.client() as client:
        session = await client.create_session()
        busy = await client.mutate("sendMessage", SEND, sessionId=session, content="first")
        assert busy["turn"]["clientMessageId"] is None
        racing = await asyncio.gather(
            *(
                client.mutate(
                    "sendMessage", SEND, sessionId=session, content="again", clientMessageId="k1"
                )
                for _ in range(4)
            )
        )
        entries = {r["queuedEntry"]["id"] for r in racing}
        assert len(entries) == 1 and all(r["userErrors"] == [] for r in racing)
        enqueued = await client.mutate(
            "enqueueMessage", ENQUEUE, sessionId=session, content="then", clientMessageId="k2"
        )
        conflict = await client.mutate(
            "enqueueMessage", ENQUEUE, sessionId=session, content="other", clientMessageId="k2"
        )
        assert _codes(conflict) == [("IDEMPOTENCY_CONFLICT", ["clientMessageId"])]
        bad = await client.mutate(
            "sendMessage", SEND, sessionId=session, content="x", clientMessageId="x" * 129
        )
        assert _codes(bad) == [("INVALID_INPUT", ["clientMessageId"])]
    served.kill()  # the answers were "lost": the client retries after the restart
    await served.start()
    async with served.client() as client:
        retried = await client.mutate(
            "sendMessage", SEND, sessionId=session, content="again", clientMessageId="k1"
        )
        assert retried["queuedEntry"]["id"] in entries
        again = await client.mutate(
            "enqueueMessage", ENQUEUE, sessionId=session, content="then", clientMessageId="k2"
        )
        assert again["entry"]["id"] == enqueued["entry"]["id"]
        data = (await client.data(TURNS, s=session))["session"]
    queued = [(e["content"], e["clientMessageId"]) for e in data["queue"]["entries"]]
    turns = [e["node"] for e in data["turnsConnection"]["edges"]]
    # Recovery ended "first" (interrupted) and ran the head: "again" as a turn carrying its key
    # and its entry (Q16); "then" still queued once. Nothing twice, nothing lost.
    prompts = [t["prompt"] for t in turns] + [c for c, _ in queued]
    assert sorted(prompts) == ["again", "first", "then"]
    by_prompt = {t["prompt"]: t for t in turns}
    if "again" in by_prompt:
        assert by_prompt["again"]["clientMessageId"] == "k1"
        assert by_prompt["again"]["queueEntryId"] in entries
    assert ("then", "k2") in queued or by_prompt["then"]["clientMessageId"] == "k2"


def _codes(payload: dict[str, Any]) -> list[tuple[str, list[str] | None]]:
    return [(e["code"], e["field"]) for e in payload["userErrors"]]


STEER = "turn { id } queuedEntry { id } outcome userErrors { code field }"
ITEMS = """query($s: ID!) { session(id: $s) { currentTurn { id items { kind
  ... on SteerItem { text entryId } } } queue { entries { content } } } }"""


async def test_q16_served_a_steered_message_joins_the_running_turn(served: ProcServer) -> None:
    """Q16 through the real server: the scripted agent takes a steered message while it runs
    (STEERED, a SteerItem of its turn, nothing queued); with no turn running, STEER starts one."""
    async with served.client() as client:
        session = await client.create_session()
        started = await client.mutate(
            "sendMessage", STEER, sessionId=session, content="work", delivery="STEER"
        )
        assert started["outcome"] == "STARTED" and started["turn"] is not None
        steered = await client.mutate(
            "sendMessage", STEER, sessionId=session, content="and the docs", delivery="STEER"
        )
        assert steered["outcome"] == "STEERED" and steered["queuedEntry"] is None
        assert steered["turn"]["id"] == started["turn"]["id"]

        async def logged() -> dict[str, Any] | None:
            data = (await client.data(ITEMS, s=session))["session"]
            items = data["currentTurn"]["items"]
            return data if any(i["kind"] == "STEER" for i in items) else None

        from clients import poll

        data = await poll(logged, "the steer item to be logged")
        (item,) = [i for i in data["currentTurn"]["items"] if i["kind"] == "STEER"]
        assert item["text"] == "and the docs" and data["queue"]["entries"] == []
