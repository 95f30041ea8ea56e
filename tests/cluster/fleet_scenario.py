"""The fleet test's kills, run beside the workload: in each cycle one instance is SIGKILLed
mid-turn and another mid-cancel, each restarted at once (in the background: the fleet runs on
while it starts).

- **Mid-turn**: the owner of a plain turn that has logged one to three of its five chunks, as
  soon as the database shows them: its clients may have some of it, or none yet (the relay of
  a committed batch may die with its owner). A kill that came after the last chunk (the turn
  streamed on between the read and the signal) does not count, and another turn is sought.
  M6: another instance ends it ``FAILED`` with what its log kept, and every client gets that
  much and the end.
- **Mid-cancel**: a ``/stubborn`` turn (it ignores the cancel's interrupt, so the cancel waits
  for its timeout) on each cancel session; on the one whose owner should die next, two entries
  are queued and a cancel is sent through the balancer; once the owner shows the cancel pending
  it is SIGKILLed. Q7: the backlog stays parked (``CANCEL``) after the recovery; C5: the flag
  clears everywhere (checked at the end). A user then resumes the queue (``setAutoRun``).

The reference client's instance (:data:`REFERENCE`) is never killed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fleet import SETTLE, Fleet
from fleet_workload import ACKED, Workload

from turnqueue.agents.scripted import reply_for

#: A kill mid-turn, then one mid-cancel, in each cycle of this many seconds of workload.
CYCLE_SECONDS = 20.0
#: The instance the reference client follows directly: never killed.
REFERENCE = 0


class Scenario:
    def __init__(self, fleet: Fleet, workload: Workload, cancel_sids: list[str]) -> None:
        self.fleet = fleet
        self.workload = workload
        self.cancel_sids = cancel_sids
        self.killed_turns: list[dict[str, Any]] = []  # the turns cut mid-stream
        self.parked: list[dict[str, Any]] = []  # what each mid-cancel left (Q7)
        self._last_victim = REFERENCE
        self._background: list[asyncio.Task[Any]] = []  # restarts and cancels under way

    def _victims(self) -> list[int]:
        """Instances that may be killed, the one killed longest ago first."""
        others = [i for i in range(len(self.fleet.servers)) if i != REFERENCE]
        return sorted(others, key=lambda i: i == self._last_victim)

    def _kill(self, index: int, why: str) -> None:
        self.fleet.kill(index, why)
        self._last_victim = index
        self._background.append(asyncio.create_task(self.fleet.restart(index)))

    async def _restarted(self) -> None:
        """Until every killed instance is back (a restart's failure fails the run)."""
        await asyncio.gather(*self._background)

    async def run(self, random_sids: list[str], seconds: float) -> None:
        clock = asyncio.get_running_loop().time
        deadline = clock() + seconds
        cycle = 0
        try:
            while cycle == 0 or clock() + CYCLE_SECONDS <= deadline:
                start = clock()
                await asyncio.sleep(2.0)  # let the workload get going (scheduling, not sync)
                await self.kill_mid_turn(random_sids)
                await asyncio.sleep(max(0.0, start + CYCLE_SECONDS * 0.4 - clock()))
                await self._restarted()
                await self.kill_mid_cancel()
                await asyncio.sleep(max(0.0, start + CYCLE_SECONDS - clock()))
                cycle += 1
        finally:
            await self._restarted()

    async def kill_mid_turn(self, sids: list[str]) -> None:
        victims = self._victims()
        self.fleet.note("mid-turn: looking for a streaming turn")
        clock = asyncio.get_running_loop().time
        deadline = clock() + SETTLE
        while clock() < deadline:
            for turn in await self.fleet.running(sids):
                plain = not turn["prompt"].startswith("/")
                if turn["index"] in victims and plain and 1 <= turn["chunks"] <= 3:
                    self._kill(turn["index"], f"mid-turn ({turn['chunks']} chunks logged)")
                    killed_at = clock()
                    # The turn may have streamed its last chunk between the read and the kill
                    # (a loaded machine): only a log its owner left short is a cut stream.
                    if await self.fleet.logged(turn["id"]) != reply_for(turn["prompt"]):
                        self.killed_turns.append({**turn, "killed_at": killed_at})
                        return
                    self.fleet.note("mid-turn: the kill came after the last chunk; again")
                    victims = [i for i in self._victims() if i != turn["index"]]
            await asyncio.sleep(0.02)  # polling another process's progress
        raise AssertionError("no streaming turn on a killable instance")

    async def kill_mid_cancel(self) -> None:
        fleet, workload = self.fleet, self.workload
        fleet.note("mid-cancel: stubborn turns")
        target = await self._stubborn_turn()
        sid, victim = target["session_id"], target["index"]
        for other in self.cancel_sids:
            if other != sid:
                self._background.append(asyncio.create_task(workload.cancel(other)))
        queued = [await workload.send(sid, workload.content(sid), queue_only=True) for _ in "ab"]
        self._background.append(asyncio.create_task(workload.cancel(sid)))
        await self._pending_on(victim, sid)
        self._kill(victim, "mid-cancel")
        clock = asyncio.get_running_loop().time
        deadline = clock() + SETTLE
        while (session := await workload.read(sid))["currentTurn"]["status"] == "RUNNING":
            assert clock() < deadline, "the dead owner's turn was never recovered (M6)"
            await asyncio.sleep(0.05)  # polling another process's progress
        self.parked.append(
            {
                "sid": sid,
                "turn": target["id"],
                "current": session["currentTurn"],
                "queue": session["queue"],
                "queued": [m.content for m in queued if m.outcome == ACKED],
            }
        )
        fleet.note("mid-cancel: recovered")
        await workload.set_auto_run(sid, True)  # a user resumes the parked queue

    async def _stubborn_turn(self) -> dict[str, Any]:
        """A running ``/stubborn`` turn on a cancel session, owned by the instance to kill next
        (or another killable one): the balancer decides which instance owns each turn."""
        workload, victims = self.workload, self._victims()
        for _round in range(6):  # bounded
            await _idle(workload, self.cancel_sids)
            for sid in self.cancel_sids:
                await workload.send(sid, workload.content(sid, "/stubborn "))
            running = await self.fleet.running(self.cancel_sids)
            mine = sorted(
                (r for r in running if r["index"] in victims and r["prompt"].startswith("/")),
                key=lambda r: victims.index(r["index"]),
            )
            if mine:
                return mine[0]
            await asyncio.gather(*(workload.cancel(sid) for sid in self.cancel_sids))
        raise AssertionError("every stubborn turn landed on the reference instance")

    async def _pending_on(self, index: int, sid: str) -> None:
        """Until instance ``index`` (the turn's owner) shows the cancel pending: accepted."""
        owner = self.fleet.direct(index)
        query = "query($s: ID!) { session(id: $s) { cancellationPending } }"
        try:
            for _ in range(int(SETTLE / 0.02)):  # bounded
                if (await owner.data(query, s=sid))["session"]["cancellationPending"]:
                    return
                await asyncio.sleep(0.02)  # polling another process's progress
        finally:
            await owner.aclose()
        raise AssertionError("the cancel never showed as pending on the turn's owner")


async def _idle(workload: Workload, sids: list[str]) -> None:
    """Until no turn runs in ``sids`` and their queues are empty (bounded)."""
    clock = asyncio.get_running_loop().time
    deadline = clock() + SETTLE
    for sid in sids:
        while True:
            session = await workload.read(sid)
            if session["state"] not in ("RUNNING", "STARTING") and not session["queue"]["entries"]:
                break
            assert clock() < deadline, f"cancel session {sid} never became idle: {session}"
            await asyncio.sleep(0.05)  # polling another process's progress
