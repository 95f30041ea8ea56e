"""The fleet (issue 24; M4, M6, C5, C7, Q7, Q10, O2, O3, R3): three ``turnqueue serve``
instances on one PostgreSQL behind HAProxy running ``docs/haproxy.cfg`` (round robin, no sticky
sessions), every mutation sent to whichever instance the balancer picks.

Clients follow every session through the balancer — one over graphql-transport-ws (gql), one
over graphql-sse (``Last-Event-ID`` on reconnect) — while a seeded workload sends prompts,
queued prompts, failing and stubborn prompts, cancels, Send Nows and auto-run changes. The
instance owning a turn that is streaming is SIGKILLed mid-turn, later another one mid-cancel
(its stubborn turn's cancel accepted, entries queued behind it), each restarted at once. Clients
on a killed instance reconnect through the balancer; every client also drops its connections
at random, so each one resumes with the API's cursors (snapshots first, ``afterOffset``,
``Last-Event-ID``, ``turnsConnection(after:)``). A reference client on the one instance never
killed never reconnects and never catches up: what an uninterrupted client sees.

At the end every client's view — each session's state, queue and pending flag, every turn's
status and full output — equals a fresh read of the truth and the reference's; no message is
lost or run twice (Q10); no ``cancellationPending`` sticks on any instance (C5); no revision
was seen with two states (R3, every snapshot, event, read and mutation answer in one ledger).

``TQ_FLEET_SECONDS`` (default 20) makes the workload longer: a kill cycle every
:data:`CYCLE_SECONDS`; ``TQ_FLEET_SEED`` picks another workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from balancer import MISSING, installed, render
from clients import TLS
from fleet import SETTLE, Fleet, name, read_truth, settle
from fleet_clients import Api, SseFollower, WsFollower, sse_events
from fleet_scenario import REFERENCE, Scenario
from fleet_view import View
from fleet_workload import Workload
from revision_ledger import Ledger

from turnqueue.agents.scripted import reply_for
from turnqueue.timeouts import within

RUN_SECONDS = float(os.environ.get("TQ_FLEET_SECONDS", "20"))
SEED = int(os.environ.get("TQ_FLEET_SEED", "24"))
RANDOM_SESSIONS = 3
CANCEL_SESSIONS = 3


@pytest.fixture
async def fleet(pg_database_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    if installed() is None:
        pytest.skip(MISSING)
    started = Fleet(pg_database_url, tmp_path)
    try:
        yield await started.start()
    finally:
        await started.aclose()


def test_docs_haproxy_cfg_is_run_as_written_but_for_its_addresses() -> None:
    """The fixture replaces only the ``bind`` line and the ``server`` block of the users'
    config (so the fleet test proves the file a user copies)."""
    config = (Path(__file__).resolve().parents[2] / "docs" / "haproxy.cfg").read_text()
    rendered = render(config, 4242, {"a": 1, "b": 2})
    changed = [line for line in rendered.splitlines() if line not in config.splitlines()]
    assert changed == [
        "    bind 127.0.0.1:4242",
        "    server a 127.0.0.1:1",
        "    server b 127.0.0.1:2",
    ]
    assert "balance roundrobin" in rendered and "option httpchk GET /readyz" in rendered
    directives = [line.split()[0] for line in rendered.splitlines() if line.strip()[:1] not in "#"]
    sticky = {"cookie", "stick", "stick-table", "hash-type", "appsession"}
    assert not sticky & set(directives), "no sticky sessions"
    assert "balance source" not in rendered


async def check_balancer(fleet: Fleet, api: Api, sid: str) -> None:
    """Through docs/haproxy.cfg: requests go round robin to all three instances, and an SSE
    stream's first event arrives while the stream stays open (nothing buffers it)."""
    api.served.clear()
    for _ in range(9):
        await api.post("query($s: ID!) { session(id: $s) { id } }", {"s": sid})
    assert set(api.served) == {name(i) for i in range(3)}, api.served
    document = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"
    params = {"query": document, "variables": f'{{"s": "{sid}"}}'}
    async with (
        httpx.AsyncClient(timeout=30, verify=TLS) as http,
        http.stream("GET", api.url, params=params, headers={"Accept": "text/event-stream"}) as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        first = await within(anext(sse_events(r)), SETTLE)
        assert first.event == "next" and first.id is not None


async def check_redispatch(fleet: Fleet, sid: str) -> None:
    """A killed instance's share of new requests goes to the others: no request that could
    not be sent to it fails (``retries``, ``option redispatch``), before and after the health
    checks take it out."""
    assert fleet.balancer is not None
    fleet.kill(2, "at the end, to see its requests go elsewhere")
    api = Api(fleet.balancer.base)
    try:
        for _ in range(12):
            body = await api.post("query($s: ID!) { session(id: $s) { id } }", {"s": sid})
            assert body["data"]["session"]["id"] == sid
    finally:
        await api.aclose()
    assert name(2) not in api.served and sum(api.served.values()) == 12, api.served


async def test_fleet_m4_m6_c5_q7_q10_o2_o3_r3_clients_through_a_balancer_survive_sigkills(
    fleet: Fleet,
) -> None:
    assert fleet.balancer is not None
    ledger = Ledger()
    rng = random.Random(SEED)
    api = Api(fleet.balancer.base)
    workload = Workload(api, ledger)
    sids = [
        await workload.create_session(f"fleet {i}")
        for i in range(RANDOM_SESSIONS + CANCEL_SESSIONS)
    ]
    random_sids, cancel_sids = sids[:RANDOM_SESSIONS], sids[RANDOM_SESSIONS:]
    await check_balancer(fleet, api, sids[0])
    clock = asyncio.get_running_loop().time
    began, times = clock(), {}

    def views(name: str) -> dict[str, View]:
        return {sid: View(name, sid, ledger) for sid in sids}

    reference = WsFollower("reference", fleet.servers[REFERENCE].ws_url, views("reference"), None)
    ws_api, sse_api = Api(fleet.balancer.base), Api(fleet.balancer.base)
    ws = WsFollower(
        "ws", fleet.balancer.ws_url, views("ws"), ws_api, random.Random(rng.random()), (3.0, 8.0)
    )
    sse = SseFollower("sse", sse_api, views("sse"), random.Random(rng.random()))
    clients: list[WsFollower | SseFollower] = [reference, ws, sse]
    stop = asyncio.Event()
    following = [asyncio.create_task(c.run(stop)) for c in clients]

    scenario = Scenario(fleet, workload, cancel_sids)
    try:
        work = asyncio.gather(
            *(workload.drive(sid, rng.randrange(1 << 30), RUN_SECONDS) for sid in random_sids),
            scenario.run(random_sids, RUN_SECONDS),
        )
        await _watch(work, following)
        times["workload"] = clock() - began
        await settle(api, sids, ledger)
        times["settle"] = clock() - began - sum(times.values())
        truths = {sid: await read_truth(api, sid, ledger, "truth") for sid in sids}
        deadline = asyncio.get_running_loop().time() + SETTLE
        while (lacking := _behind(clients, truths, reference)) is not None:
            if asyncio.get_running_loop().time() > deadline:
                fleet.note(f"clients never caught up: {lacking}")
                raise AssertionError(f"clients never caught up: {lacking}")
            await _watch(asyncio.sleep(0.1), following)
        times["caught up"] = clock() - began - sum(times.values())
        stop.set()
        for task in following:  # a follower's failure has surfaced already (``_watch``)
            task.cancel()
        await asyncio.gather(*following, return_exceptions=True)
        await ws.sync()
        await sse.catch_up()
        times["stopped and synced"] = clock() - began - sum(times.values())
        # every instance agrees with the truth read through the balancer; no flag sticks (C5)
        for index in range(3):
            direct = fleet.direct(index)
            try:
                for sid in sids:
                    mine = await read_truth(direct, sid, ledger, f"{name(index)} truth")
                    assert mine["session"]["cancellationPending"] is False, (name(index), sid)
                    assert mine["session"]["queue"] == truths[sid]["session"]["queue"]
                    assert mine["turns"] == truths[sid]["turns"]
            finally:
                await direct.aclose()
        await check_redispatch(fleet, sids[0])
    finally:
        stop.set()
        for task in following:
            task.cancel()
        for task in following:
            with contextlib.suppress(BaseException):
                await task
        for client_api in (api, ws_api, sse_api):
            await client_api.aclose()

    # every client ends with the truth, the reference's view included
    for client in clients:
        for sid, truth in truths.items():
            _assert_view(client.views[sid], truth)
    # Q10: nothing lost or run twice
    all_turns = [t for truth in truths.values() for t in truth["turns"]]
    all_entries = [e for truth in truths.values() for e in truth["session"]["queue"]["entries"]]
    assert workload.whereabouts(all_turns, all_entries) == []
    # the kills: a turn cut mid-stream ends FAILED with the output its log kept (M6, O1) -- or
    # CANCELLED when a user's cancel reached it before recovery did (C5: its agent is gone)
    for killed in scenario.killed_turns:
        turn = next(t for t in all_turns if t["id"] == killed["id"])
        cancelled = any(
            at > killed["killed_at"] for at in workload.cancels.get(killed["session_id"], [])
        )
        assert turn["status"] == "FAILED" or (cancelled and turn["status"] == "CANCELLED"), turn
        assert turn["output"] and reply_for(turn["prompt"]).startswith(turn["output"])
        assert turn["output"] != reply_for(turn["prompt"])
    # Q7: a cancel accepted before its owner died parked the backlog behind it
    for parked in scenario.parked:
        assert parked["current"]["id"] == parked["turn"], parked
        assert parked["queue"]["autoRun"] is False, parked
        assert parked["queue"]["pauseReason"] == "CANCEL", parked
        assert [e["content"] for e in parked["queue"]["entries"]] == parked["queued"], parked
    ledger.check()  # R3
    # the run did what it says
    assert set(api.served) >= {name(i) for i in range(3)}, api.served
    assert ws.stats.reconnects + ws.stats.drops >= 1 and sse.stats.reconnects >= 1
    assert fleet.killed >= 3 and len(scenario.parked) >= 1
    print(  # the figures of a long run (docs/reliability.md)
        f"\nfleet: {RUN_SECONDS:.0f} s, seed {SEED}; story: {fleet.story}; "
        f"mutations: {sum(workload.outcomes.values())} {dict(workload.outcomes)}; "
        f"turns: {len(all_turns)}; messages: {len(workload.messages)}; "
        f"served: {dict(api.served)}; ledger: {ledger.count} snapshots; "
        f"ws: {ws.stats}; sse: {sse.stats}; reference: {reference.stats}; "
        f"seconds: { {k: round(v, 1) for k, v in times.items()} }"
    )


async def _watch(work: Any, following: list[asyncio.Task[None]]) -> Any:
    """Await ``work``; a follower that failed (a broken stream, an interrupted reference)
    fails the test at once instead of after the workload."""
    work_task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait([work_task, *following], return_when=asyncio.FIRST_COMPLETED)
        for task in following:
            if task in done and task.exception() is not None:
                work_task.cancel()
                raise task.exception()  # type: ignore[misc]
        if work_task in done:
            return work_task.result()
        following = [t for t in following if t not in done]


def _behind(
    clients: list[WsFollower | SseFollower],
    truths: dict[str, dict[str, Any]],
    reference: WsFollower,
) -> str | None:
    """What the first client still lacks of the truth's session and queue revisions (and,
    for the reference, which never catches up, of every turn's end); None when none lacks
    anything."""
    for client in clients:
        for sid, truth in truths.items():
            view = client.views[sid]
            for kind, expected in (
                ("session", truth["session"]),
                ("queue", truth["session"]["queue"]),
            ):
                held = view.latest.get(kind)
                if held is None or held["revision"] != expected["revision"]:
                    return f"{client.name} {sid} {kind}: {held} (truth {expected})"
            if client is reference:
                for turn in truth["turns"]:
                    mine = view.turns.get(turn["id"])
                    if mine is None or mine.status is None:
                        return f"reference {sid}: turn {turn} ends as {mine}"
    return None


def _assert_view(view: View, truth: dict[str, Any]) -> None:
    session = truth["session"]
    expected_session = {
        k: session[k] for k in ("revision", "state", "clarification", "currentTurn")
    }
    summary = view.summary()
    where = f"{view.name} {view.sid}"
    assert summary["session"] == expected_session, where
    assert summary["queue"] == session["queue"], where
    assert summary["pending"] is False, where
    expected_turns = {t["id"]: (t["status"], t["output"]) for t in truth["turns"]}
    missing = set(expected_turns) - set(summary["turns"])
    extra = set(summary["turns"]) - set(expected_turns)
    assert not missing and not extra, f"{where}: missing {missing}, extra {extra}"
    for turn_id, expected in expected_turns.items():
        assert summary["turns"][turn_id] == expected, f"{where} {turn_id}"
