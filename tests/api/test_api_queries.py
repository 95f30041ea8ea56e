"""Queries: batched reads through per-operation DataLoaders (no N+1), turns(last:), currentTurn."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

NESTED = """{ tasks(first: 10) { id currentSession { id autoRun } sessions {
  id autoRun queue { count } cancellationPending cancellation { pending }
  task { id sessions { id queue { revision } } } } } }"""


async def test_tasks_sessions_queue_are_batched_not_n_plus_1(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        await api.create_session()
    calls: Counter[str] = Counter()
    store, engine = api.engine.store, api.engine

    def counting(target: Any, name: str) -> None:
        original = getattr(target, name)

        async def wrapper(*args: Any) -> Any:
            calls[name] += 1
            return await original(*args)

        monkeypatch.setattr(target, name, wrapper)

    for name in ("sessions_of_tasks", "tasks", "sessions"):
        counting(store, name)
    counting(engine, "queue_status")
    data = await api.data(NESTED)
    assert len(data["tasks"]) == 3
    # One batched read per level, and one queue read per distinct session, whatever the nesting.
    assert calls["sessions_of_tasks"] == 1 and calls["tasks"] == 1 and calls["sessions"] == 1
    assert calls["queue_status"] == 3
    # A second request does not reuse the first one's cache (fresh loaders per operation).
    await api.data(NESTED)
    assert calls["queue_status"] == 6


async def test_turns_last_oldest_first_and_current_turn(api: Any) -> None:
    sid = await api.create_session()
    query = """query($id: ID!, $last: Int!) { session(id: $id) {
      currentTurn { prompt status } turns(last: $last) { prompt } } }"""
    empty = await api.data(query, id=sid, last=5)
    assert empty["session"] == {"currentTurn": None, "turns": []}
    async with api.ws() as ws:
        stream = ws.subscribe(
            "subscription($s: ID!) { sessionChanged(sessionId: $s) { state revision } }", s=sid
        )
        await stream.next()
        for prompt in ("one", "two", "three"):
            await api.mutate("sendMessage", "turn { id }", sessionId=sid, content=prompt)
            await stream.until(lambda m: m["sessionChanged"]["state"] == "WAITING_FOR_INPUT")
    data = await api.data(query, id=sid, last=2)
    assert data["session"]["turns"] == [{"prompt": "two"}, {"prompt": "three"}]
    assert data["session"]["currentTurn"] == {"prompt": "three", "status": "COMPLETED"}
    capped = await api.data(query, id=sid, last=10_000)
    assert len(capped["session"]["turns"]) == 3
    # S3 (issue 23): refused as turnsConnection refuses it, not answered [].
    refused = await api.gql(query, id=sid, last=-1)
    assert refused["errors"][0]["extensions"]["code"] == "INVALID_INPUT", refused


async def test_concurrent_requests_each_get_their_own_answer(api: Any) -> None:
    sessions = await asyncio.gather(*(api.create_session() for _ in range(5)))
    query = "query($id: ID!) { session(id: $id) { id queue { sessionId } } }"
    answers = await asyncio.gather(*(api.data(query, id=s) for s in sessions))
    assert [a["session"]["queue"]["sessionId"] for a in answers] == list(sessions)


async def test_q16_agents_say_whether_a_steer_send_may_be_taken(api: Any) -> None:
    """Q16: ``agents { steering }`` tells a client whether to offer Steer: the scripted agent
    takes steered messages."""
    data = await api.data("{ agents { name type steering } }")
    assert data["agents"] == [
        {"name": "scripted", "type": "SCRIPTED", "steering": True},
        {"name": "slow", "type": "SCRIPTED", "steering": True},
    ]


async def test_s3_a_field_error_that_cancels_its_siblings_spares_the_reads_they_share(
    api: Any,
) -> None:
    """graphql-core cancels the sibling fields of a field whose error reaches their parent
    (``gather_with_cancel``). A read those siblings share with fields elsewhere in the
    operation (one DataLoader future per key) must not be cancelled with them: the other
    fields get their answer and the request its error, never a 500 (the schema fuzz found it;
    docs/upstream/graphql-core-gather-cancels-dataloader.md)."""
    sid = await api.create_session()
    query = """query($s: ID!) {
      a: session(id: $s) { cancellationRevision }
      b: session(id: $s) { cancellationRevision turns(last: -1) { status } }
      c: session(id: $s) { cancellationRevision } }"""
    response = await api.post(query, {"s": sid})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"]["b"] is None and body["errors"]  # the error reached b
    assert body["data"]["a"] == body["data"]["c"] == {"cancellationRevision": 0}
