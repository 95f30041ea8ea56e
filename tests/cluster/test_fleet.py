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
from balancer import render
from clients import TLS
from fleet import SETTLE, Fleet, name, read_truth, settle
from fleet_clients import Api, SseFollower, WsFollower, sse_events
from fleet_view import View
from fleet_workload import ACKED, Workload
from revision_ledger import Ledger

from turnqueue.agents.scripted import reply_for

RUN_SECONDS = float(os.environ.get("TQ_FLEET_SECONDS", "20"))
SEED = int(os.environ.get("TQ_FLEET_SEED", "24"))
#: A kill mid-turn, then one mid-cancel, in each cycle of this many seconds of workload.
CYCLE_SECONDS = 20.0
#: The instance the reference client follows directly: never killed.
REFERENCE = 0
RANDOM_SESSIONS = 3
CANCEL_SESSIONS = 3


@pytest.fixture
async def fleet(pg_database_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
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


async def test_m4_o3_the_balancer_spreads_requests_and_streams_sse_unbuffered(
    fleet: Fleet,
) -> None:
    """Through docs/haproxy.cfg: requests go round robin to all three instances; an SSE
    stream's first event arrives while the stream stays open (nothing buffers it); a killed
    instance's requests go to the others (no 5xx for a request that could not be sent)."""
    assert fleet.balancer is not None
    api = Api(fleet.balancer.base)
    try:
        sid = (await api.mutate("createTask", "session { id }", title="lb"))["session"]["id"]
        for _ in range(9):
            await api.data("query($s: ID!) { session(id: $s) { id } }", s=sid)
        assert set(api.served) == {name(i) for i in range(3)}, api.served
        document = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"
        params = {"query": document, "variables": f'{{"s": "{sid}"}}'}
        async with (
            httpx.AsyncClient(timeout=30, verify=TLS) as http,
            http.stream(
                "GET", api.url, params=params, headers={"Accept": "text/event-stream"}
            ) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            first = await asyncio.wait_for(anext(sse_events(response)), 20)
            assert first.event == "next" and first.id is not None
        fleet.kill(2, "to see its requests go elsewhere")
        api.served.clear()
        for _ in range(9):
            await api.data("query($s: ID!) { session(id: $s) { id } }", s=sid)
        assert name(2) not in api.served and sum(api.served.values()) == 9
    finally:
        await api.aclose()


class Scenario:
    """The kills, between the workload's mutations (see the module's docstring)."""

    def __init__(self, fleet: Fleet, workload: Workload, cancel_sids: list[str]) -> None:
        self.fleet = fleet
        self.workload = workload
        self.cancel_sids = cancel_sids
        self.killed_turns: list[dict[str, Any]] = []
        self.parked: list[dict[str, Any]] = []
        self._last_victim = 2

    def _victims(self) -> list[int]:
        """Instances that may be killed, the one killed longest ago first."""
        others = [i for i in range(3) if i != REFERENCE]
        return sorted(others, key=lambda i: i == self._last_victim)

    async def run(self, random_sids: list[str], seconds: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        cycle = 0
        while cycle == 0 or loop.time() + CYCLE_SECONDS <= deadline:
            start = loop.time()
            await asyncio.sleep(2.0)  # let the workload get going (scheduling, not sync)
            await self.kill_mid_turn(random_sids)
            await asyncio.sleep(max(0.0, start + CYCLE_SECONDS * 0.4 - loop.time()))
            await self.kill_mid_cancel()
            await asyncio.sleep(max(0.0, start + CYCLE_SECONDS - loop.time()))
            cycle += 1

    async def kill_mid_turn(self, sids: list[str]) -> None:
        """SIGKILL the owner of a plain turn that has streamed some but not all of its output."""
        victims = self._victims()
        deadline = asyncio.get_running_loop().time() + SETTLE
        while asyncio.get_running_loop().time() < deadline:
            rows = [
                r
                for r in await self.fleet.running(sids)
                if r["index"] in victims
                and not r["prompt"].startswith("/")
                and 1 <= r["chunks"] <= 3
            ]
            if rows:
                turn = rows[0]
                self.fleet.kill(turn["index"], f"mid-turn ({turn['chunks']} chunks logged)")
                self._last_victim = turn["index"]
                self.killed_turns.append(turn)
                await self.fleet.restart(turn["index"])
                return
            await asyncio.sleep(0.02)  # polling another process's progress
        raise AssertionError("no streaming turn on a killable instance")

    async def kill_mid_cancel(self) -> None:
        """Stubborn turns on the cancel sessions; on the one whose owner should die next, two
        entries are queued and a cancel is sent; once the owner shows the cancel pending, it is
        SIGKILLed. Q7: the backlog stays parked; C5: the flag clears everywhere."""
        fleet, workload = self.fleet, self.workload
        await settle(workload.api, self.cancel_sids, workload.ledger)
        victims = self._victims()
        target: dict[str, Any] | None = None
        for _round in range(6):  # bounded: the balancer decides which instance owns each turn
            for sid in self.cancel_sids:
                await workload.send(sid, workload.content(sid, "/stubborn "))
            running = await fleet.running(self.cancel_sids)
            candidates = sorted(
                (r for r in running if r["index"] in victims),
                key=lambda r: victims.index(r["index"]),
            )
            if candidates:
                target = candidates[0]
                break
            await asyncio.gather(*(workload.cancel(sid) for sid in self.cancel_sids))
        assert target is not None, "every stubborn turn landed on the reference instance"
        sid, victim = target["session_id"], target["index"]
        others = [asyncio.create_task(workload.cancel(s)) for s in self.cancel_sids if s != sid]
        queued = [
            await workload.send(sid, workload.content(sid), queue_only=True) for _ in range(2)
        ]
        cancelling = asyncio.create_task(workload.cancel(sid))
        owner = fleet.direct(victim)
        try:
            for _ in range(int(SETTLE / 0.02)):  # bounded
                data = await owner.data(
                    "query($s: ID!) { session(id: $s) { cancellationPending } }", s=sid
                )
                if data["session"]["cancellationPending"]:
                    break
                await asyncio.sleep(0.02)  # polling another process's progress
            else:
                raise AssertionError("the cancel never showed as pending on the turn's owner")
        finally:
            await owner.aclose()
        fleet.kill(victim, "mid-cancel")
        self._last_victim = victim
        outcome = await cancelling
        await fleet.restart(victim)
        await asyncio.gather(*others)
        await settle(workload.api, self.cancel_sids, workload.ledger)
        session = await workload.read(sid)
        self.parked.append(
            {
                "sid": sid,
                "turn": target["id"],
                "outcome": outcome,
                "queue": session["queue"],
                "queued": [m.content for m in queued if m.outcome == ACKED],
                "current": session["currentTurn"],
            }
        )
        # Q7 (a user resumes the parked queue; its entries then run)
        await workload.set_auto_run(sid, True)


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
        await settle(api, sids, ledger)
        truths = {sid: await read_truth(api, sid, ledger, "truth") for sid in sids}
        deadline = asyncio.get_running_loop().time() + SETTLE
        while not await _up_to_date(clients, truths, reference):
            assert asyncio.get_running_loop().time() < deadline, "clients never caught up"
            await _watch(asyncio.sleep(0.1), following)
        stop.set()
        await _watch(asyncio.gather(*following), following)
        await ws.sync()
        await sse.catch_up()
    finally:
        stop.set()
        for task in following:
            task.cancel()
        for task in following:
            with contextlib.suppress(BaseException):
                await task
        for client_api in (api, ws_api, sse_api):
            await client_api.aclose()

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
    # every client ends with the truth, the reference's view included
    for client in clients:
        for sid, truth in truths.items():
            _assert_view(client.views[sid], truth)
    # Q10: nothing lost or run twice
    all_turns = [t for truth in truths.values() for t in truth["turns"]]
    all_entries = [e for truth in truths.values() for e in truth["session"]["queue"]["entries"]]
    assert workload.whereabouts(all_turns, all_entries) == []
    # the kills: a turn cut mid-stream ends FAILED with the output its log kept (M6, O1)
    for killed in scenario.killed_turns:
        turn = next(t for t in all_turns if t["id"] == killed["id"])
        assert turn["status"] == "FAILED", turn
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
    assert len(fleet.kills) >= 2 and len(scenario.parked) >= 1
    print(  # the figures of a long run (docs/reliability.md)
        f"\nfleet: {RUN_SECONDS:.0f} s, seed {SEED}; kills: {fleet.kills}; "
        f"mutations: {sum(workload.outcomes.values())} {dict(workload.outcomes)}; "
        f"turns: {len(all_turns)}; messages: {len(workload.messages)}; "
        f"served: {dict(api.served)}; ledger: {ledger.count} snapshots; "
        f"ws: {ws.stats}; sse: {sse.stats}; reference: {reference.stats}"
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


async def _up_to_date(
    clients: list[WsFollower | SseFollower],
    truths: dict[str, dict[str, Any]],
    reference: WsFollower,
) -> bool:
    """Every client holds the truth's session and queue revisions; the reference (which never
    catches up) also every turn's end."""
    for client in clients:
        for sid, truth in truths.items():
            view = client.views[sid]
            session, queue = view.latest.get("session"), view.latest.get("queue")
            if session is None or session["revision"] != truth["session"]["revision"]:
                return False
            if queue is None or queue["revision"] != truth["session"]["queue"]["revision"]:
                return False
            if client is reference and any(
                view.turns.get(t["id"]) is None or view.turns[t["id"]].status is None
                for t in truth["turns"]
            ):
                return False
    return True


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
