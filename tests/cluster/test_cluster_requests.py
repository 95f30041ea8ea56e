"""Requests to a turn's owner are rows (M4, C5, C7): real ``turnqueue serve`` processes on one
PostgreSQL. An operation only the owner can perform (here a cancel) asked on another instance is
a row in ``owner_requests``; NOTIFY only wakes the owner, so a lost notification costs time, never
the request, and a request whose owner died before taking it is withdrawn and run where it was
asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from cluster_helpers import WAIT
from test_cluster_cancellation import Cluster, state

from turnqueue.store.notify import asyncpg_dsn
from turnqueue.timeouts import within


@pytest.fixture
async def cluster(pg_database_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    group = Cluster(pg_database_url, tmp_path)
    yield group
    await group.aclose()


async def requests_of(database_url: str, op: str) -> list[tuple[str, Any]]:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        rows = await conn.fetch("SELECT state, outcome FROM owner_requests WHERE op = $1", op)
    finally:
        await conn.close()
    return [(r["state"], r["outcome"]) for r in rows]


async def test_m4_c7_a_cancel_asked_while_the_owner_hears_nothing_still_runs(
    cluster: Cluster, pg_database_url: str
) -> None:
    """M4/C7: A runs the turn and its LISTEN is cut, so the NOTIFY announcing B's cancel never
    reaches it. A finds the request row after a heartbeat, stops the turn and records the
    outcome; B answers STOPPED. (As a request-reply message, the cancel was lost with the
    notification and answered TIMED_OUT after the cancel timeout.)"""
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "60", "TURNQUEUE_LEASE_SECONDS": "3"}
    a, proxy = await cluster.start(proxied=True, **env)
    b, _ = await cluster.start(**env)
    assert proxy is not None
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="long")  # A owns it
    await cluster.cut_listen(proxy)
    try:
        cancelled = await within(b.mutate("cancel", "outcome", sessionId=sid), WAIT)
    finally:
        proxy.release()
    assert cancelled["outcome"] == "STOPPED"
    after = await state(b, sid)
    assert [(t["prompt"], t["status"]) for t in after["turns"]] == [("long", "CANCELLED")]
    assert after["cancellationPending"] is False
    assert [s for s, _ in await requests_of(pg_database_url, "cancel")] == ["DONE"]


async def test_m4_c5_a_cancel_asked_of_a_dead_owner_is_withdrawn_and_runs_here(
    cluster: Cluster, pg_database_url: str
) -> None:
    """M4/C5: A runs the turn and is SIGKILLed; B's cancel, asked before A's lease ran out,
    waits only until it does: the request A never took is withdrawn (it can never run late)
    and the cancel runs on B, where the turn whose agent is gone ends. Nothing stays RUNNING
    or pending. (As a request-reply message it answered TIMED_OUT after the cancel timeout.)"""
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "60", "TURNQUEUE_LEASE_SECONDS": "5"}
    a, _ = await cluster.start(**env)
    b, _ = await cluster.start(**env)
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="long")  # A owns it
    a.kill()
    cancelled = await within(b.mutate("cancel", "outcome", sessionId=sid), WAIT)
    # B's own recovery may end the orphaned turn first: then nothing was left to cancel.
    assert cancelled["outcome"] in ("STOPPED", "NOTHING_RUNNING"), cancelled
    assert [s for s, _ in await requests_of(pg_database_url, "cancel")] == ["WITHDRAWN"]
    after = await state(b, sid)
    assert after["turns"][0]["status"] in ("CANCELLED", "FAILED"), after["turns"]
    assert after["cancellationPending"] is False
    sent = await b.mutate("sendMessage", "turn { id }", sessionId=sid, content="next")
    assert sent["turn"] is not None  # the session takes its next prompt
