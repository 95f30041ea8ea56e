"""Output followed on another instance (O2, M4, issue 23 finding 1): two real ``turnqueue serve``
processes on one PostgreSQL; a turn runs on A and a ``turnOutput`` subscriber on B, subscribed
before the turn starts, so every chunk reaches it through the cross-instance relay, not through
its first read of the log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import WAIT, Server, Subscriber

from turnqueue.agents.scripted import reply_for

FOLLOW = """subscription($s: ID!) {
  turnOutput(sessionId: $s) { turnId offset text done status } }"""


@pytest.fixture
async def pair(pg_database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Server, Server]]:
    group = [
        Server(pg_database_url, tmp_path / f"server{i}.log", TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5")
        for i in range(2)
    ]
    try:
        for server in group:  # one after the other: the first runs the migrations
            await server.start()
        yield group[0], group[1]
    finally:
        for server in group:
            server.stop()


async def _turn(sub: Subscriber, turn_id: str) -> list[dict[str, Any]]:
    """The chunks of ``turn_id`` up to its ``done`` (the stream follows the session)."""
    chunks: list[dict[str, Any]] = []
    for _ in range(1_000):  # bounded
        chunk = (await sub.next(timeout=WAIT))["turnOutput"]
        assert chunk["turnId"] == turn_id, chunk
        chunks.append(chunk)
        if chunk["done"]:
            return chunks
    raise AssertionError("no done")


def _text(chunks: list[dict[str, Any]]) -> str:
    offset = 0
    for chunk in chunks:
        assert chunk["offset"] == offset, chunks  # no gap, no duplicate
        offset += len(chunk["text"])
    return "".join(c["text"] for c in chunks)


async def test_o2_m4_multibyte_output_reaches_another_instance_whole(
    pair: tuple[Server, Server],
) -> None:
    """Issue 23 (1): B's subscriber received one chunk, offset 5121, text "", done: chunks were
    cut at 937 characters, JSON-escaped emoji are 12 bytes each, the NOTIFY was refused (over
    8,000 bytes) and the whole batch of notifications with it. The relay now carries a pointer
    and B reads the text from the log."""
    a, b = pair
    sid = await a.create_session()
    async with Subscriber(b, FOLLOW, s=sid) as sub:
        # A first turn proves the stream on B listens before the emoji turn starts.
        warm = await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="warm up")
        assert _text(await _turn(sub, warm["turn"]["id"])) == reply_for("warm up")
        prompt = "😀" * 5_000 + " and 𝄞 ✓ é"
        sent = await a.mutate("sendMessage", "turn { id }", sessionId=sid, content=prompt)
        chunks = await _turn(sub, sent["turn"]["id"])
    assert _text(chunks) == reply_for(prompt)
    assert len(chunks) > 2  # streamed in several chunks, not read once at the end
    assert chunks[-1]["status"] == "COMPLETED"
    for server in (a, b):
        assert "could not send" not in server.log_text(), server
