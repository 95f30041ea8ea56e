"""P4's and P8's hand-written baseline (``bench/handwritten.py``, issue 27) does the job of
``setAutoRun``: it answers the status the mutation answers (policy, next revision, holds,
entries), refuses a caller who does not own the session, and sends one transaction's worth of
statements. No timing."""

from __future__ import annotations

import json
from typing import Any

import pytest

for module in ("psutil", "websockets"):
    pytest.importorskip(module, reason="the bench extra is not installed")

from bench.common import ServerProcess, post_json  # noqa: E402
from bench.p4_http import (  # noqa: E402
    HANDWRITTEN,
    record_mutation,
    set_auto_run,
    statement_count,
)

pytestmark = pytest.mark.timeout(120)


async def _hand(server: ServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    status, data = await post_json(server.port, HANDWRITTEN, json.dumps(body).encode())
    assert status == 200, data
    answer: dict[str, Any] = json.loads(data)["data"]["setAutoRun"]
    return answer


async def test_p4_the_handwritten_baseline_does_the_mutations_job(database_url: str) -> None:
    sqlite = database_url.startswith("sqlite")
    async with ServerProcess(database_url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": 1}).encode())
        sid = setup["sessions"][0]["id"]
        mutation = json.loads(await set_auto_run(server.port, sid, True))["data"]["setAutoRun"]
        revision = mutation["queue"]["revision"]
        for step, on in enumerate((False, True, True), start=1):
            await server.call("/bench/record/start")
            answer = await _hand(server, {"sessionId": sid, "autoRun": on})
            recording = await server.call("/bench/record/stop")
            assert answer["userErrors"] == [] and answer["dispatched"] is False
            queue = answer["queue"]
            # the third call changes nothing: no write, no new revision (as the rule)
            assert queue["revision"] == revision + min(step, 2)
            assert (queue["autoRun"], queue["pauseReason"]) == (on, None if on else "USER")
            assert (queue["heldBy"], queue["count"]) == (mutation["queue"]["heldBy"], 0)
            # one transaction (the first call also opens the connection: its set-up first)
            tx = recording["transactions"][-1]["statements"]
            ends = [s["sql"].split()[0].rstrip(";").upper() for s in (tx[0], tx[-1])]
            assert ends == ["BEGIN", "COMMIT"]
            wrote = step < 3
            assert len(tx) == (6 if sqlite else 5) if wrote else 4
        # turnqueue reads what the baseline wrote, and goes on from its revision
        again = json.loads(await set_auto_run(server.port, sid, False))["data"]["setAutoRun"]
        assert again["queue"]["revision"] == revision + 3
        refused = await _hand(server, {"sessionId": sid, "autoRun": True, "principal": "eve"})
        assert [e["code"] for e in refused["userErrors"]] == ["NOT_FOUND"]


async def test_p4_set_auto_run_sends_about_the_statements_written_by_hand(
    database_url: str,
) -> None:
    """Issue 27: the mutation sends what the hand-written job sends (BEGIN, the locked read,
    the policy and revision, COMMIT) but the entries, which an empty queue does not read (the
    view's ``queued`` says none). On PostgreSQL, round trips: BEGIN with the lock row (the view
    must be a statement of its own, ``PostgresTx.lock``), the view, the policy and revision
    in one, the cross-instance NOTIFY with the COMMIT. No second read of the view, and none of
    the head for an empty queue."""
    async with ServerProcess(database_url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": 1}).encode())
        recorded = await record_mutation(server, setup["sessions"][0]["id"])
    sqlite = database_url.startswith("sqlite")
    for name in ("off", "on"):
        assert len(recorded[name]["transactions"]) == 1
        assert statement_count(recorded[name]) == (5 if sqlite else 4)
