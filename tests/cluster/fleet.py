"""The fleet: three ``turnqueue serve`` processes on one PostgreSQL behind HAProxy, and what the
test reads of the truth (the database and fresh reads) to judge its clients by.

An instance is named by its index (0, 1, 2) and, in the balancer, ``turnqueue<index + 1>``; its
current process's epoch (``instances.id``, ``turns.owner``) is learnt when it starts, so the test
can find which instance owns a running turn and kill exactly that one. A killed instance is
restarted on the same port (the balancer's config names it): clients reconnecting later land on
the new process too, which runs its start-up recovery and takes a new epoch (R2, M6).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped,unused-ignore]
from balancer import Balancer
from cluster_helpers import Server
from fleet_clients import Api
from fleet_view import READ, TURNS, record_read
from revision_ledger import Ledger

from turnqueue.store.notify import asyncpg_dsn

#: The scripted agent streams 5 chunks over a turn; a ``/stubborn`` turn ignores the cancel's
#: interrupt and lasts 10 turns' time, so its cancel escalates after the cancel timeout.
ENV = {
    "TURNQUEUE_SCRIPTED_TURN_SECONDS": "0.8",
    "TURNQUEUE_CANCEL_TIMEOUT": "2",
    "TURNQUEUE_ESCALATION_TIMEOUT": "0.5",
    # The bound of a cancel; one forwarded to an owner that dies waits this + 5 s (see the
    # report in docs/reliability.md): kept short so the run stays short.
    "TURNQUEUE_CANCEL_OPERATION_TIMEOUT": "6",
}
INSTANCES = 3
#: Bound of every wait of the fleet on itself (a loaded 2-core machine is slow).
SETTLE = 60.0


def name(index: int) -> str:
    return f"turnqueue{index + 1}"


class Fleet:
    def __init__(self, database_url: str, directory: Path) -> None:
        self.database_url = database_url
        self.servers = [
            Server(database_url, directory / f"server{i}.log", **ENV) for i in range(INSTANCES)
        ]
        self.epochs: list[int] = []
        self._known: set[int] = set()
        self._dir = directory
        self.balancer: Balancer | None = None
        self.db: Any = None
        self._db_lock = asyncio.Lock()  # one connection: one statement at a time
        self.story: list[str] = []
        self.killed = 0
        self._began = 0.0

    async def start(self) -> Fleet:
        self._began = asyncio.get_running_loop().time()
        self.db = await asyncpg.connect(asyncpg_dsn(self.database_url))
        for server in self.servers:  # one after the other: the first runs the migrations
            await server.start()
            self.epochs.append(await self._new_epoch())
        backends = {name(i): s.port for i, s in enumerate(self.servers)}
        self.balancer = await Balancer(backends, self._dir).start()
        self.note("started")
        return self

    async def _new_epoch(self) -> int:
        rows = await self._fetch("SELECT id FROM instances")
        new = {int(r["id"]) for r in rows} - self._known
        assert len(new) == 1, f"expected one new instance row, found {new}"
        self._known |= new
        return new.pop()

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        """The test's own reads of the truth (owners, epochs): the kills and the background
        restarts share one connection."""
        async with self._db_lock:
            rows: list[Any] = await self.db.fetch(query, *args)
            return rows

    def index_of(self, epoch: int | None) -> int | None:
        return self.epochs.index(epoch) if epoch in self.epochs else None

    def kill(self, index: int, why: str) -> None:
        self.servers[index].kill()
        self.killed += 1
        self.note(f"{name(index)} killed {why}")

    def note(self, what: str) -> None:
        """A line of the run's story, with its time since the fleet started (also in
        ``fleet.log``, which a failed test's report shows)."""
        line = f"{asyncio.get_running_loop().time() - self._began:.1f}s {what}"
        self.story.append(line)
        with (self._dir / "fleet.log").open("a") as log:
            log.write(line + "\n")

    async def restart(self, index: int) -> None:
        server = self.servers[index]
        port = server.port
        await server.start()
        assert server.port == port, "the restarted instance lost its port to another process"
        self.epochs[index] = await self._new_epoch()
        assert self.balancer is not None
        await self.balancer.wait_up({name(index)})
        self.note(f"{name(index)} restarted")

    async def aclose(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for server in self.servers:
            await asyncio.to_thread(server.stop)
        if self.db is not None:
            await self.db.close()

    async def running(self, sids: list[str]) -> list[dict[str, Any]]:
        """The RUNNING turns of ``sids`` with their owners' indexes and logged chunks."""
        rows = await self._fetch(
            "SELECT t.id, t.session_id, t.owner, t.prompt, "
            "(SELECT count(*) FROM turn_output o WHERE o.turn_id = t.id) AS chunks "
            "FROM turns t WHERE t.status = 'RUNNING' AND t.session_id = ANY($1::text[])",
            sids,
        )
        return [{**dict(r), "index": self.index_of(r["owner"])} for r in rows]

    async def logged(self, turn_id: str) -> str:
        """The text a turn's log holds (read after its owner died: it can no longer grow)."""
        rows = await self._fetch(
            "SELECT o.text FROM turn_output o WHERE o.turn_id = $1 AND o.kind = 'MESSAGE' "
            "ORDER BY o.seq",
            turn_id,
        )
        return "".join(r["text"] for r in rows)

    def direct(self, index: int) -> Api:
        """An HTTP client to one instance, bypassing the balancer (the test's own reads)."""
        return Api(self.servers[index].url.removesuffix("/graphql"))


async def read_truth(api: Api, sid: str, ledger: Ledger, where: str) -> dict[str, Any]:
    """A fresh read: the session (its three kinds) and every turn with its output."""
    session = (await api.data(READ, s=sid))["session"]
    record_read(ledger, sid, session, where)
    turns: list[dict[str, Any]] = []
    after = None
    for _ in range(100):  # bounded paging
        page = (await api.data(TURNS, s=sid, after=after))["session"]["turnsConnection"]
        turns += [edge["node"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    return {"session": session, "turns": turns}


def busy(session: dict[str, Any]) -> bool:
    """Work is under way or due: a turn runs, a cancel is pending, or a queue with auto-run ON
    and nothing holding it (Q9) has entries to start."""
    queue = session["queue"]
    return bool(
        session["state"] in ("RUNNING", "STARTING")
        or session["cancellationPending"]
        or (queue["autoRun"] and queue["entries"] and not session["clarification"])
    )


async def settle(api: Api, sids: list[str], ledger: Ledger) -> None:
    """Until no session has work under way or due (bounded: a queue left idle with auto-run
    ON, Q9, or a pending flag that sticks, C5, fails here)."""
    deadline = asyncio.get_running_loop().time() + SETTLE
    while True:
        states = {sid: (await api.data(READ, s=sid))["session"] for sid in sids}
        for sid, session in states.items():
            record_read(ledger, sid, session, "settle read")
        if not any(busy(s) for s in states.values()):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the fleet never settled: {states}")
        await asyncio.sleep(0.1)
