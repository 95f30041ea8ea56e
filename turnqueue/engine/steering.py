"""Steering (Q16): a message offered to the running turn.

A steered send is first a queued message: its unit of work queues an entry and writes a *steer
request* beside it (``steer_requests``). The instance running the turn reacts to the queue's
change (its own event, another instance's NOTIFY, each heartbeat as the fallback): under the
session lock it offers the entry to the agent (``Steerable.steer``); taken, the entry goes
with the request decided STEERED, in one unit of work; not taken, it stays queued (QUEUED). A
turn that ends first leaves it queued too, and the drain may start it (STARTED). The requester
waits for that decision and answers it.

Hazards:
- *Never both steered and queued.* A request is decided once (``decide_steer``, a conditional
  update): by the owner, or by the requester once the turn it was offered to has ended. The
  owner decides STEERED in the transaction that removes the entry.
- *The right turn.* An owner now running another turn than the request names decides QUEUED.
- An agent that dies while it answers the offer counts as not having taken it.
"""

from __future__ import annotations

import asyncio
import logging

from turnqueue.agents import Steerable
from turnqueue.bus import Event, EventKind
from turnqueue.domain import (
    MessageSource,
    QueueEntry,
    SendOutcome,
    SteerRequest,
    TurnStatus,
)
from turnqueue.engine.admission import Admission, record, replay
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns
from turnqueue.engine.unit_of_work import check_capacity
from turnqueue.timeouts import within

log = logging.getLogger(__name__)


#: How often a requester reads its request again between events (a decision that changed no
#: queue, e.g. QUEUED by the owner, sends no event).
POLL_SECONDS = 0.2


class Steering:
    def __init__(self, core: Core, turns: Turns) -> None:
        self.core = core
        self.turns = turns
        self._offering: dict[str, asyncio.Task[None]] = {}
        # Another instance's queue change of a session whose turn runs here may be a request
        # made there; a request made here is offered at once (``send``).
        self.core.bus.add_listener(self._on_event)

    async def send(self, session_id: str, content: str, key: str | None) -> Admission:
        """Offer ``content`` to the running turn; with none running, an ordinary send (it
        starts or queues). Answers what happened (STEERED, QUEUED or STARTED)."""
        async with self.core.change(session_id) as c:
            turn_id = c.view.running_turn_id
            if turn_id is None or c.view.clarification is not None:
                return await self.turns.send_in(c, content, key)
            replayed = await replay(c, key, content)
            if replayed is not None:
                return replayed
            check_capacity(c.view, self.core.settings.queue_limit)
            entry = await c.tx.add_entry(
                session_id, content=content, source=MessageSource.USER, client_message_id=key
            )
            request_id = await c.tx.add_steer_request(session_id, turn_id, entry.id)
        if session_id in self.core.runners:
            self.poke(session_id)  # the turn runs here (elsewhere: its instance is told)
        admission = await self._decided(session_id, request_id, entry)
        if key is not None:
            async with self.core.change(session_id) as c:
                await record(c, key, content, admission)
        return admission

    async def _decided(self, session_id: str, request_id: str, entry: QueueEntry) -> Admission:
        """Wait for the request's decision (bounded: past it, the requester decides QUEUED)."""
        deadline = asyncio.get_running_loop().time() + self.core.settings.cancel_operation_timeout
        with self.core.bus.subscribe(session_id, [EventKind.QUEUE, EventKind.SESSION]) as sub:
            while True:
                decided = await self._read(session_id, request_id, entry, give_up=False)
                if decided is not None:
                    return decided
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("steer request %s was not answered; it stays queued", request_id)
                    given_up = await self._read(session_id, request_id, entry, give_up=True)
                    assert given_up is not None
                    return given_up
                try:
                    await within(sub.get(), POLL_SECONDS)
                except TimeoutError:
                    pass

    async def _read(
        self, session_id: str, request_id: str, entry: QueueEntry, *, give_up: bool
    ) -> Admission | None:
        """The request's outcome, deciding it here when the turn it was offered to has ended
        (or ``give_up``); None while it is still the owner's to decide."""
        async with self.core.change(session_id, session_lock=False) as c:
            request = await c.tx.steer_request(request_id)
            assert request is not None
            turn = await c.tx.get_turn(request.turn_id)
            pending = request.state == "PENDING"
            if pending and not give_up and turn is not None and turn.status is TurnStatus.RUNNING:
                return None
            if request.state == SendOutcome.STEERED:
                return Admission(turn=turn, outcome=SendOutcome.STEERED)
            started = await c.tx.turn_started_from(session_id, entry.id)
            if not pending:
                return Admission(turn=started, entry=entry, outcome=SendOutcome(request.state))
            outcome = SendOutcome.STARTED if started is not None else SendOutcome.QUEUED
            if not await c.tx.decide_steer(request_id, outcome.value):
                return None  # the owner decided meanwhile: read it next time
            return Admission(turn=started, entry=entry, outcome=outcome)

    def _on_event(self, event: Event) -> None:
        if (
            event.relayed
            and event.kind is EventKind.QUEUE
            and event.session_id in self.core.runners
        ):
            self.poke(event.session_id)

    def poke(self, session_id: str) -> None:
        """Offer the session's pending requests to its running turn (one offer at a time)."""
        if self.core.closing:
            return
        running = self._offering.get(session_id)
        if running is None or running.done():
            task = self.core.spawn(self._offer(session_id), name=f"steer:{session_id}")
            self._offering[session_id] = task
            task.add_done_callback(lambda _: self._offering.pop(session_id, None))

    def sweep(self) -> None:
        """The fallback for a missed NOTIFY: every session running here is looked at."""
        for session_id in list(self.core.runners):
            self.poke(session_id)

    async def _offer(self, session_id: str) -> None:
        async with self.core.session_lock(session_id):
            async with self.core.store.read() as tx:
                pending = await tx.pending_steers(session_id)
                visible = {e.id: e for e in await tx.list_entries(session_id)}
            for request in pending:
                await self._offer_one(request, visible.get(request.entry_id))

    async def _offer_one(self, request: SteerRequest, entry: QueueEntry | None) -> None:
        """Under the session lock: a runner's turn and its end change only under it."""
        runner = self.core.runners.get(request.session_id)
        if runner is None or runner.ending or runner.turn.id != request.turn_id:
            return  # not ours to decide: the requester decides once the turn has ended
        run = runner.agent_run
        taken = False
        if entry is not None and isinstance(run, Steerable):
            try:
                taken = await run.steer(entry.content, entry.id)
            except Exception:
                log.exception("turn %s: steering failed", request.turn_id)
        async with self.core.change(request.session_id, session_lock=False) as c:
            state = SendOutcome.STEERED if taken else SendOutcome.QUEUED
            if await c.tx.decide_steer(request.id, state.value) and taken:
                await c.tx.remove_entries(request.session_id, [request.entry_id])
