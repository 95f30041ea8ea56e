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
