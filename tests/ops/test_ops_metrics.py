"""Operations (U3): ``/metrics`` moves with the work, ``/healthz``, ``/readyz`` (503 when the
database is unreachable), and structured JSON logs that carry session and turn ids."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from clients import TLS, poll
from gql import Client as GqlClient
from gql import gql
from gql.transport.websockets import WebsocketsTransport
from ops_helpers import Client, InProc, Metrics, ProcServer, inproc_server
from sqlalchemy.engine import make_url

from turnqueue.errors import StoreError

TOKENS = {"alice": "tok-a"}
FAMILIES = [
    "turnqueue_turns_started",
    "turnqueue_turns_ended",
    "turnqueue_reservations",
    "turnqueue_cancellations",
    "turnqueue_cancellation_duration_seconds",
    "turnqueue_subscriptions",
    "turnqueue_subscription_groups",
    "turnqueue_subscription_members",
    "turnqueue_event_delivery_seconds",
    "turnqueue_events_published",
    "turnqueue_errors",
    "turnqueue_queue_depth",
    "turnqueue_queue_in_flight",
    "turnqueue_running_turns",
    "turnqueue_asyncio_tasks",
    "process_resident_memory_bytes",
]
QUEUE_SUB = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision count } }"


async def turn_status(client: Client, sid: str) -> str | None:
    data = await client.data("query($s: ID!) { session(id: $s) { currentTurn { status } } }", s=sid)
    turn = data["session"]["currentTurn"]
    return turn["status"] if turn else None


async def scrape(server: InProc) -> Metrics:
    # S1: /metrics needs no token.
    async with httpx.AsyncClient(timeout=10, verify=TLS) as bare:
        response = await bare.get(f"{server.client.base}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return Metrics(response.text)


async def test_u3_metrics_expose_every_family_without_a_token(database_url: str) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        page = await scrape(server)
    missing = [f for f in FAMILIES if f not in page.families]
    assert not missing, page.text
    assert page.value("turnqueue_database_up") == 1


async def test_u3_turn_reservation_and_queue_depth_metrics_move(database_url: str) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        c = server.client
        before = await scrape(server)
        sid = await c.create_session()
        await c.ok("sendMessage", "turn { id }", sessionId=sid, content="hello")
        await poll(lambda: _is(turn_status(c, sid), "COMPLETED"), "the turn to complete")
        after_turn = await scrape(server)
        assert after_turn.value("turnqueue_turns_started_total") == (
            before.value("turnqueue_turns_started_total") + 1
        )
        key = ("turnqueue_turns_ended_total", "COMPLETED")
        assert after_turn.value(key[0], status=key[1]) == before.value(key[0], status=key[1]) + 1
        # Q3: the turn's end ran one automatic reservation of an empty queue.
        assert (
            after_turn.value("turnqueue_reservations_total", kind="automatic", outcome="empty")
            >= before.value("turnqueue_reservations_total", kind="automatic", outcome="empty") + 1
        )

        busy = await c.create_session(agent="slow")
        await c.ok("sendMessage", "turn { id }", sessionId=busy, content="long")
        for text in ("one", "two"):
            await c.ok("enqueueMessage", "entry { id }", sessionId=busy, content=text)
        queued = await scrape(server)
        assert queued.value("turnqueue_queue_depth") == 2
        assert queued.value("turnqueue_running_turns") == 1
        # Q9: the enqueue's automatic drain was held by the busy session.
        assert (
            queued.value("turnqueue_reservations_total", kind="automatic", outcome="held")
            >= after_turn.value("turnqueue_reservations_total", kind="automatic", outcome="held")
            + 2
        )


async def _is(value: Any, expected: object) -> bool:
    return bool(await value == expected)


async def test_u3_q7_cancel_counts_and_times_the_cancellation(database_url: str) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        c = server.client
        sid = await c.create_session(agent="slow")
        await c.ok("sendMessage", "turn { id }", sessionId=sid, content="long")
        await c.ok("enqueueMessage", "entry { id }", sessionId=sid, content="parked")
        before = await scrape(server)
        payload = await c.ok("cancel", "outcome", sessionId=sid)
        assert payload["outcome"] == "STOPPED"
        after = await scrape(server)
        counter = ("turnqueue_cancellations_total", {"outcome": "STOPPED"})
        assert after.value(counter[0], **counter[1]) == before.value(counter[0], **counter[1]) + 1
        hist = "turnqueue_cancellation_duration_seconds_count"
        assert after.value(hist, outcome="STOPPED") == before.value(hist, outcome="STOPPED") + 1
        duration = after.value("turnqueue_cancellation_duration_seconds_sum", outcome="STOPPED")
        assert 0 < duration < server.settings.cancel_operation_timeout
        assert after.value("turnqueue_turns_ended_total", status="CANCELLED") >= 1
        # Q7 parked the backlog in the commit that released the reference: no drain followed.
        paused = ("turnqueue_reservations_total", {"kind": "automatic", "outcome": "paused"})
        assert after.value(paused[0], **paused[1]) == before.value(paused[0], **paused[1])
        read = await c.data(
            "query($s: ID!) { session(id: $s) { queue { autoRun pauseReason } } }", s=sid
        )
        assert read["session"]["queue"] == {"autoRun": False, "pauseReason": "CANCEL"}
        # C9: a cancel with nothing running is counted under its own outcome.
        assert (await c.ok("cancel", "outcome", sessionId=sid))["outcome"] == "NOTHING_RUNNING"
        nothing = await scrape(server)
        assert nothing.value("turnqueue_cancellations_total", outcome="NOTHING_RUNNING") == 1
        # Q6: drain is a targeted reservation.
        await c.ok("drain", "drained", sessionId=sid)
        drained = await scrape(server)
        assert (
            drained.value("turnqueue_reservations_total", kind="targeted", outcome="started") == 1
        )


async def test_u3_subscription_gauge_and_delivery_latency(database_url: str) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        c = server.client
        sid = await c.create_session()
        base = await scrape(server)
        transport = WebsocketsTransport(
            url=c.ws_url,
            init_payload={"authorization": "Bearer tok-a"},
            subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        )
        async with GqlClient(transport=transport) as session:
            request = gql(QUEUE_SUB)
            request.variable_values = {"s": sid}
            stream = session.subscribe(request)
            await stream.__anext__()  # the snapshot: the bus subscription exists by now
            subscribed = await scrape(server)
            assert subscribed.value("turnqueue_subscriptions") == (
                base.value("turnqueue_subscriptions") + 1
            )
            # A second identical subscription joins the first one's group (one execution,
            # one bus subscription): members count the sockets, groups the executions.
            second = session.subscribe(request)
            await second.__anext__()
            joined = await scrape(server)
            assert joined.value("turnqueue_subscription_members") == 2
            assert joined.value("turnqueue_subscription_groups") == 1
            assert (
                joined.value("turnqueue_subscriptions") == base.value("turnqueue_subscriptions") + 1
            )
            await second.aclose()
            await c.ok("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
            await stream.__anext__()
            delivered = await scrape(server)
            count = "turnqueue_event_delivery_seconds_count"
            assert delivered.value(count) >= base.value(count) + 1
            assert delivered.value("turnqueue_event_delivery_seconds_sum") < 5
            await stream.aclose()

        async def gone() -> bool:
            page = await scrape(server)
            return bool(
                page.value("turnqueue_subscriptions") == base.value("turnqueue_subscriptions")
            )

        await poll(gone, "the subscription gauge to come back down")


async def test_u3_s3_masked_faults_are_counted_as_errors(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        before = await scrape(server)

        async def broken(*_args: object) -> object:
            raise RuntimeError("boom")

        monkeypatch.setattr(server.engine, "tasks", broken)
        body = await server.client.gql("{ tasks { id } }")
        assert body["errors"][0]["message"] == "Unexpected error."
        after = await scrape(server)
        key = ("turnqueue_errors_total", "turnqueue.api.assembly")
        assert after.value(key[0], logger=key[1]) == before.value(key[0], logger=key[1]) + 1


async def test_u3_healthz_and_readyz_503_when_the_database_is_unreachable(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with inproc_server(database_url, tokens=TOKENS) as server:
        async with httpx.AsyncClient(base_url=server.client.base, timeout=10, verify=TLS) as bare:
            assert (await bare.get("/healthz")).json() == {"status": "ok"}
            ready = await bare.get("/readyz")
            assert ready.status_code == 200 and ready.json()["database"] == "ok"
            if database_url.startswith("postgresql"):
                await _drop_database(database_url)  # really gone: connections are refused
            else:

                async def unreachable() -> None:
                    raise StoreError("database error: unable to open database file")

                monkeypatch.setattr(server.engine.store, "ping", unreachable)
            down = await bare.get("/readyz")
            assert down.status_code == 503 and down.json() == {"status": "unavailable"}
            assert (await bare.get("/healthz")).status_code == 200  # alive, not ready
            page = await bare.get("/metrics")
            assert page.status_code == 200  # metrics still served (database_up tells)


async def _drop_database(url: str) -> None:
    parsed = make_url(url)
    admin = make_url(os.environ["TURNQUEUE_TEST_DATABASE_URL"])
    conn = await asyncpg.connect(
        admin.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    finally:
        await conn.close()


async def test_u3_json_logs_parse_and_carry_session_and_turn_ids(
    tmp_path: Path, database_url: str
) -> None:
    log = tmp_path / "server.log"
    server = ProcServer(
        database_url,
        log,
        TURNQUEUE_LOG_JSON="true",
        TURNQUEUE_LOG_LEVEL="INFO",
        TURNQUEUE_SCRIPTED_TURN_SECONDS="0.1",
    )
    await server.start()
    client = server.client()
    try:
        sid = await client.create_session()
        turn = await client.ok("sendMessage", "turn { id }", sessionId=sid, content="hi")
        turn_id = turn["turn"]["id"]
        await poll(lambda: _is(turn_status(client, sid), "COMPLETED"), "the turn to complete")

        def ended_line() -> list[dict[str, Any]]:
            return [r for r in _records(log) if r.get("turn_id") == turn_id]

        async def logged() -> list[dict[str, Any]]:
            return ended_line()

        lines = await poll(logged, "the turn's end to be logged")
    finally:
        await client.aclose()
        server.stop()
    records = _records(log)
    assert records and all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    assert lines[0]["session_id"] == sid and "ended COMPLETED" in lines[0]["message"]
    # The request's own log lines (uvicorn's access log) carry the session it authorised.
    access = [r for r in records if r["logger"] == "uvicorn.access" and r.get("session_id") == sid]
    assert access, records[-10:]


def _records(log: Path) -> list[dict[str, Any]]:
    records = []
    for line in log.read_text().splitlines():
        if line.strip():
            records.append(json.loads(line))  # every line is JSON, or this fails
    return records
