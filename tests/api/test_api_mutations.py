"""Every mutation through the real server: success, and each ``userErrors`` code it can answer.

Rule ids: Q2 Q5 Q6 Q7 Q11 Q12 Q13 C3 C9 W1 S3 (§7 mutation payloads).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from turnqueue.timeouts import within

QUEUE = (
    "queue { id sessionId revision autoRun pauseReason heldBy count max entries { id content } }"
)
UNKNOWN = str(uuid.UUID(int=1))


def codes(payload: dict[str, Any]) -> list[str]:
    return [e["code"] for e in payload["userErrors"]]


async def busy_session(api: Any, token: str = "tok-a") -> str:
    """A session whose first turn (the ``slow`` agent) keeps it RUNNING until cancelled."""
    sid = await api.create_session(token, agent="slow")
    started = await api.mutate("sendMessage", "turn { status }", token, sessionId=sid, content="t0")
    assert started["turn"]["status"] == "RUNNING", started
    return str(sid)


async def enqueue(api: Any, sid: str, content: str) -> dict[str, Any]:
    payload = await api.mutate(
        "enqueueMessage",
        f"dispatched entry {{ id content source }} {QUEUE}",
        sessionId=sid,
        content=content,
    )
    assert payload["userErrors"] == [], payload
    return payload


async def test_create_task_success_and_invalid_input(api: Any) -> None:
    created = await api.mutate(
        "createTask",
        "task { id title workflowStep currentSession { id } } "
        "session { id state agent promptable cancellationPending cancellationRevision }",
        title="write the report",
    )
    assert created["userErrors"] == []
    session = created["session"]
    assert created["task"]["currentSession"]["id"] == session["id"]
    assert created["task"]["workflowStep"] == "IN_PROGRESS"
    assert session["state"] == "WAITING_FOR_INPUT" and session["promptable"] is True
    assert session["agent"] == "scripted" and session["cancellationPending"] is False  # C6

    unknown_agent = await api.mutate("createTask", "task { id }", title="t", agent="nope")
    assert unknown_agent["task"] is None and codes(unknown_agent) == ["INVALID_INPUT"]
    assert unknown_agent["userErrors"][0]["field"] == ["agent"]
    blank = await api.mutate("createTask", "task { id }", title="   ")
    assert codes(blank) == ["INVALID_INPUT"]


async def test_send_message_starts_then_queues_when_busy(api: Any) -> None:
    sid = await busy_session(api)
    queued = await api.mutate(
        "sendMessage",
        f"session {{ state }} turn {{ id }} queuedEntry {{ content }} {QUEUE}",
        sessionId=sid,
        content="later",
    )
    assert queued["turn"] is None and queued["queuedEntry"]["content"] == "later"
    assert queued["session"]["state"] == "RUNNING" and queued["queue"]["count"] == 1
    assert "BUSY" in queued["queue"]["heldBy"]


async def test_s3_malformed_unknown_and_oversized_inputs_are_user_errors(api: Any) -> None:
    sid = await api.create_session()
    malformed = await api.mutate("sendMessage", "turn { id }", sessionId="x'; DROP", content="a")
    assert codes(malformed) == ["INVALID_INPUT"] and malformed["userErrors"][0]["field"]
    unknown = await api.mutate("sendMessage", "turn { id }", sessionId=UNKNOWN, content="a")
    assert codes(unknown) == ["NOT_FOUND"]
    empty = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content=" ")
    assert codes(empty) == ["INVALID_INPUT"]
    huge = "x" * (api.settings.max_content_bytes + 1)
    oversized = await api.mutate("enqueueMessage", "entry { id }", sessionId=sid, content=huge)
    assert codes(oversized) == ["INVALID_INPUT"] and oversized["entry"] is None
    data = await api.data(
        "query($id: ID!) { session(id: $id) { queue { count } turns { id } } }", id=sid
    )
    assert data["session"] == {"queue": {"count": 0}, "turns": []}  # nothing changed


async def test_q11_queue_full_names_size_and_limit(start_api: Any) -> None:
    api = await start_api(queue_max=2)
    sid = await busy_session(api)
    await enqueue(api, sid, "a")
    second = await enqueue(api, sid, "b")
    assert second["queue"]["max"] == 2 and second["dispatched"] is False
    full = await api.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="c")
    assert codes(full) == ["QUEUE_FULL"] and full["entry"] is None
    assert (
        "2" in full["userErrors"][0]["message"] and "at most 2" in full["userErrors"][0]["message"]
    )
    also_full = await api.mutate("sendMessage", "queuedEntry { id }", sessionId=sid, content="d")
    assert codes(also_full) == ["QUEUE_FULL"]


async def test_enqueue_on_idle_session_dispatches_and_q13_expected_revision(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    first = await enqueue(api, sid, "go")
    assert first["dispatched"] is True  # the automatic drain after enqueueMessage (Q3)
    revision = first["queue"]["revision"]
    stale = await api.mutate(
        "enqueueMessage", "entry { id }", sessionId=sid, content="x", expectedRevision=revision - 1
    )
    assert codes(stale) == ["QUEUE_CHANGED"]
    fresh = await api.mutate(
        "enqueueMessage",
        f"dispatched {QUEUE}",
        sessionId=sid,
        content="x",
        expectedRevision=revision,
    )
    assert fresh["userErrors"] == [] and fresh["queue"]["revision"] > revision


async def test_q12_update_remove_reorder_clear(api: Any) -> None:
    sid = await busy_session(api)
    a = (await enqueue(api, sid, "a"))["entry"]["id"]
    b = (await enqueue(api, sid, "b"))["entry"]["id"]
    c = (await enqueue(api, sid, "c"))["entry"]["id"]

    updated = await api.mutate("updateQueueEntry", QUEUE, sessionId=sid, entryId=a, content="A")
    assert [e["content"] for e in updated["queue"]["entries"]] == ["A", "b", "c"]
    missing = await api.mutate(
        "updateQueueEntry", QUEUE, sessionId=sid, entryId=UNKNOWN, content="z"
    )
    assert codes(missing) == ["ENTRY_NOT_FOUND"] and missing["queue"] is None
    malformed = await api.mutate("removeQueueEntry", QUEUE, sessionId=sid, entryId="nope")
    assert codes(malformed) == ["INVALID_INPUT"]

    reordered = await api.mutate("reorderQueue", QUEUE, sessionId=sid, orderedIds=[c, a, b])
    assert [e["id"] for e in reordered["queue"]["entries"]] == [c, a, b]
    partial = await api.mutate("reorderQueue", QUEUE, sessionId=sid, orderedIds=[c, a])
    assert codes(partial) == ["QUEUE_CHANGED"]
    stale = await api.mutate(
        "removeQueueEntry",
        QUEUE,
        sessionId=sid,
        entryId=b,
        expectedRevision=reordered["queue"]["revision"] - 1,
    )
    assert codes(stale) == ["QUEUE_CHANGED"]

    removed = await api.mutate("removeQueueEntry", QUEUE, sessionId=sid, entryId=b)
    assert [e["id"] for e in removed["queue"]["entries"]] == [c, a]
    gone = await api.mutate("removeQueueEntry", QUEUE, sessionId=sid, entryId=b)
    assert codes(gone) == ["ENTRY_NOT_FOUND"]
    cleared = await api.mutate("clearQueue", QUEUE, sessionId=sid)
    assert cleared["queue"]["count"] == 0 and cleared["queue"]["entries"] == []
    stale_clear = await api.mutate("clearQueue", QUEUE, sessionId=sid, expectedRevision=0)
    assert codes(stale_clear) == ["QUEUE_CHANGED"]


async def test_c9_cancel_nothing_running_and_q7_cancel_parks_backlog(api: Any) -> None:
    idle = await api.create_session()
    noop = await api.mutate(
        "cancel",
        "outcome cancellation { id pending revision } session { cancellationPending }",
        sessionId=idle,
    )
    assert noop["outcome"] == "NOTHING_RUNNING" and noop["cancellation"]["pending"] is False
    assert noop["cancellation"]["id"] == f"cancellation:{idle}"

    sid = await busy_session(api)
    await enqueue(api, sid, "next")
    stopped = await api.mutate(
        "cancel",
        "outcome cancellation { pending revision } "
        "session { state cancellationPending cancellationRevision currentTurn { status } "
        f"{QUEUE} }}",
        sessionId=sid,
    )
    assert stopped["outcome"] == "STOPPED", stopped
    session = stopped["session"]
    assert session["state"] == "WAITING_FOR_INPUT" and session["cancellationPending"] is False
    assert session["currentTurn"]["status"] == "CANCELLED"
    assert session["cancellationRevision"] == stopped["cancellation"]["revision"] > 0  # C6
    assert session["queue"]["autoRun"] is False and session["queue"]["pauseReason"] == "CANCEL"
    assert session["queue"]["count"] == 1  # Q7: the backlog is parked, not started
    assert codes(await api.mutate("cancel", "outcome", sessionId=UNKNOWN)) == ["NOT_FOUND"]


async def test_q2_set_auto_run(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    off = await api.mutate(
        "setAutoRun", f"dispatched turn {{ id }} {QUEUE}", sessionId=sid, autoRun=False
    )
    assert off["dispatched"] is False and off["queue"]["autoRun"] is False
    assert off["queue"]["pauseReason"] == "USER"
    parked = await enqueue(api, sid, "held")
    assert parked["dispatched"] is False and parked["queue"]["count"] == 1
    stale = await api.mutate(
        "setAutoRun", "dispatched", sessionId=sid, autoRun=True, expectedRevision=0
    )
    assert codes(stale) == ["QUEUE_CHANGED"]
    on = await api.mutate(
        "setAutoRun", f"dispatched turn {{ prompt status }} {QUEUE}", sessionId=sid, autoRun=True
    )
    assert on["dispatched"] is True and on["turn"] == {"prompt": "held", "status": "RUNNING"}
    assert on["queue"]["autoRun"] is True and on["queue"]["pauseReason"] is None
    # Q2: OFF never stops the active turn.
    off_again = await api.mutate("setAutoRun", "queue { heldBy }", sessionId=sid, autoRun=False)
    assert off_again["queue"]["heldBy"] == ["BUSY"]


async def test_q6_drain(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    await api.mutate("setAutoRun", "dispatched", sessionId=sid, autoRun=False)
    empty = await api.mutate("drain", f"drained turn {{ id }} {QUEUE}", sessionId=sid)
    assert empty["userErrors"] == [] and empty["drained"] is False
    assert empty["queue"]["autoRun"] is True
    await api.mutate("setAutoRun", "dispatched", sessionId=sid, autoRun=False)
    await enqueue(api, sid, "one")
    await enqueue(api, sid, "two")
    drained = await api.mutate("drain", f"drained turn {{ prompt }} {QUEUE}", sessionId=sid)
    assert drained["drained"] is True and drained["turn"]["prompt"] == "one"
    assert [e["content"] for e in drained["queue"]["entries"]] == ["two"]
    busy = await api.mutate("drain", "drained", sessionId=sid)
    assert codes(busy) == ["SESSION_BUSY"]


async def test_q5_send_now_entry_and_its_errors(api: Any) -> None:
    sid = await busy_session(api)
    a = (await enqueue(api, sid, "a"))["entry"]["id"]
    b = (await enqueue(api, sid, "b"))["entry"]["id"]
    no_entry = await api.mutate("sendNow", "sentCount", sessionId=sid, scope="ENTRY")
    assert codes(no_entry) == ["INVALID_INPUT"]
    all_with_entry = await api.mutate("sendNow", "sentCount", sessionId=sid, scope="ALL", entryId=a)
    assert codes(all_with_entry) == ["INVALID_INPUT"]
    missing = await api.mutate("sendNow", "sentCount", sessionId=sid, entryId=UNKNOWN)
    assert codes(missing) == ["ENTRY_NOT_FOUND"]
    stale = await api.mutate("sendNow", "sentCount", sessionId=sid, entryId=b, expectedRevision=0)
    assert codes(stale) == ["QUEUE_CHANGED"]

    sent = await api.mutate(
        "sendNow", f"sentCount turn {{ prompt status }} {QUEUE}", sessionId=sid, entryId=b
    )
    assert sent["userErrors"] == [] and sent["sentCount"] == 1
    assert sent["turn"] == {"prompt": "b", "status": "RUNNING"}
    assert [e["id"] for e in sent["queue"]["entries"]] == [a] and sent["queue"]["autoRun"] is True

    await api.mutate("clearQueue", "queue { count }", sessionId=sid)
    empty = await api.mutate("sendNow", "sentCount", sessionId=sid, scope="ALL")
    assert codes(empty) == ["QUEUE_EMPTY"]


async def test_c3_send_now_conflicts_with_a_cancel_under_way(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="/stubborn")
    await enqueue(api, sid, "queued")
    async with api.ws() as ws:
        stream = ws.subscribe(
            "subscription($s: ID!) { cancellationChanged(sessionId: $s) { pending } }", s=sid
        )
        assert (await stream.next())["cancellationChanged"]["pending"] is False
        cancel = asyncio.create_task(api.mutate("cancel", "outcome", sessionId=sid))
        assert (await stream.next())["cancellationChanged"]["pending"] is True
        conflict = await api.mutate("sendNow", "sentCount", sessionId=sid, scope="ALL")
        assert codes(conflict) == ["SEND_NOW_CONFLICT"]
        outcome = await within(cancel, 10)
        assert outcome["outcome"] in ("ESCALATED", "STOPPED"), outcome
        assert (await stream.next())["cancellationChanged"]["pending"] is False


async def test_clarification_pending_and_answer(api: Any) -> None:
    sid = await api.create_session()
    async with api.ws() as ws:
        stream = ws.subscribe(
            "subscription($s: ID!) { sessionChanged(sessionId: $s) "
            "{ state clarification { id question } } }",
            s=sid,
        )
        await stream.next()
        await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="/ask which one?")
        seen = await stream.until(lambda m: m["sessionChanged"]["clarification"] is not None)
        clarification = seen[-1]["sessionChanged"]["clarification"]
    assert clarification["question"] == "which one?"
    pending = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="hello")
    assert codes(pending) == ["CLARIFICATION_PENDING"]
    pending_now = await api.mutate("sendNow", "sentCount", sessionId=sid, scope="ALL")
    assert codes(pending_now) in (["CLARIFICATION_PENDING"], ["QUEUE_EMPTY"])
    wrong = await api.mutate(
        "answerClarification", "session { id }", sessionId=sid, answer="x", clarificationId=UNKNOWN
    )
    assert codes(wrong) == ["NO_CLARIFICATION"]
    answered = await api.mutate(
        "answerClarification",
        "session { state clarification { id } currentTurn { prompt } }",
        sessionId=sid,
        answer="the first",
        clarificationId=clarification["id"],
    )
    assert answered["userErrors"] == []
    assert answered["session"]["clarification"] is None
    assert answered["session"]["currentTurn"]["prompt"] == "the first"
    again = await api.mutate("answerClarification", "session { id }", sessionId=sid, answer="x")
    assert codes(again) == ["NO_CLARIFICATION"]


async def test_w1_move_task(api: Any) -> None:
    created = await api.mutate("createTask", "task { id }", title="move me")
    task_id = created["task"]["id"]
    moved = await api.mutate(
        "moveTask", "task { workflowStep } session { id state }", taskId=task_id, step="REVIEW"
    )
    assert moved["userErrors"] == [] and moved["task"]["workflowStep"] == "REVIEW"
    unknown = await api.mutate("moveTask", "task { id }", taskId=task_id, step="NOWHERE")
    assert codes(unknown) == ["INVALID_INPUT"] and unknown["task"] is None
    malformed = await api.mutate("moveTask", "task { id }", taskId="bad", step="DONE")
    assert codes(malformed) == ["INVALID_INPUT"]
    missing = await api.mutate("moveTask", "task { id }", taskId=UNKNOWN, step="DONE")
    assert codes(missing) == ["NOT_FOUND"]
