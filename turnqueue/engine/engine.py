"""The engine's one entry point: its reads (``engine/reads.py``), its commands — authorisation
and input checks (``engine/access.py``), then the queue, turn, cancel and workflow rules — and
its lifecycle (open, join the cluster, close).

Every command takes the calling principal first. A session or task the principal does not
own is reported exactly like one that does not exist (S2), so ids cannot be probed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from turnqueue.agents import Agent, build_agents
from turnqueue.bus import EventBus
from turnqueue.domain import (
    Approval,
    CancellationStatus,
    CancelOutcome,
    MessageSource,
    QueueStatus,
    SendNowScope,
    Session,
    Task,
)
from turnqueue.engine.access import check_client_message_id, check_content, check_id
from turnqueue.engine.admission import Admission
from turnqueue.engine.agent_sessions import AgentSessions
from turnqueue.engine.approvals import Approvals
from turnqueue.engine.cancel import Cancels
from turnqueue.engine.cluster import Cluster, ClusterHooks
from turnqueue.engine.core import Core, Metrics
from turnqueue.engine.queue import Applied, Enqueued, QueueOps, SendNowResult
from turnqueue.engine.reads import Lookups
from turnqueue.engine.recovery import recover
from turnqueue.engine.steering import Steering
from turnqueue.engine.turns import Turns
from turnqueue.engine.workflow import Workflows, load_workflow
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.settings import Settings
from turnqueue.store import Store


@dataclass(frozen=True, slots=True)
class EngineStats:
    """This process's runtime counts, read from memory (no database read)."""

    #: turns running in this process
    running_turns: int
    #: open event subscriptions on this process's bus
    subscriptions: int


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Queue entries over every session, from the database (other instances' included)."""

    #: queued entries, visible to clients
    visible: int
    #: entries reserved and not yet started (Q10)
    in_flight: int


@dataclass(frozen=True, slots=True)
class CancelResult:
    session: Session
    cancellation: CancellationStatus
    outcome: CancelOutcome


class Engine(Lookups):
    """The reads (:class:`Lookups`), the commands, and the engine's lifecycle."""

    def __init__(self, core: Core) -> None:
        # The workflow is built last (it stops and drains through the other parts): its
        # call-backs (W1, W2) reach it through ``self``.
        self.turns = Turns(
            core,
            moves_on_complete=lambda sid: self.workflows.moves_on_complete(sid),
            on_completed=lambda sid: self.workflows.on_completed(sid),
        )
        self.cancels = Cancels(
            core,
            self.turns,
            moves_on_cancel=lambda sid: self.workflows.moves_on_cancel(sid),
            on_cancelled=lambda sid: self.workflows.on_completed(sid),
        )
        self.queue = QueueOps(core, self.turns, self.cancels)
        super().__init__(core, AgentSessions(core, self.turns))
        self.workflows = Workflows(
            core, self.turns, self.cancels, close_agent=self.agent_sessions.close
        )
        self.approvals = Approvals(core, self.turns)  # A6
        self.steering = Steering(core, self.turns)  # Q16

    @classmethod
    async def open(
        cls,
        settings: Settings,
        store: Store,
        bus: EventBus,
        agents: dict[str, Agent] | None = None,
    ) -> Engine:
        """Take a new epoch (R2), recover what a dead process left behind (M6), and start."""
        workflow = load_workflow(settings.workflow_file)
        default: str = settings.agent
        if agents is None:
            agents, default = build_agents(settings)  # A1: a bad agents file raises here
        async with store.transaction() as tx:
            epoch = await tx.next_epoch()
        engine = cls(Core(settings, store, bus, agents, workflow, epoch))
        engine.agent_sessions.default = default
        if store.shared:  # M4: other instances share the database
            await engine._join_cluster()
        await recover(engine.core, engine.turns, sweep=True)
        return engine

    async def _join_cluster(self) -> None:
        """Hear the other instances, answer their requests, adopt the dead's (M4, M6)."""
        core = self.core

        async def adopt_orphans(live: set[int], dead: frozenset[int]) -> None:
            # Each heartbeat: recover what dead instances left (when one has just died, also
            # the queues it left eligible: a crash after a turn's end), then the steer requests
            # in case a NOTIFY was lost.
            if not core.closing:
                await recover(core, self.turns, sweep=bool(dead), live=live)
                self.steering.sweep()

        async def expelled() -> None:  # the others recovered this instance's turns
            for runner in list(core.runners.values()):
                runner.abandon()

        served = {
            "cancel": self.cancels.serve_forwarded,
            "send_now": self.queue.serve_forwarded,
            "answer_approval": self.approvals.serve_forwarded,  # A6 on any instance
            "close_agent": self.agent_sessions.serve_close,  # A8: where it runs
            "release_agent": self.agent_sessions.serve_release,  # A8: resumed elsewhere
        }
        hooks = ClusterHooks(handlers=served, on_orphans=adopt_orphans, on_expelled=expelled)
        core.cluster = cluster = Cluster(
            instance=core.instance,
            lease=core.settings.lease_seconds,
            store=core.store,
            bus=core.bus,
            spawn=core.spawn,
            hooks=hooks,
        )
        await cluster.start()

    async def aclose(self) -> None:
        """Graceful shutdown: stop every running turn, then wait for background work."""
        self.core.closing = True
        for runner in list(self.core.runners.values()):
            self.core.spawn(self.cancels.stop(runner), name=f"shutdown:{runner.turn.id}")
        await self.core.drain_tasks(self.core.settings.cancel_operation_timeout)
        for agent in self.core.agents.values():
            await agent.aclose()
        if self.core.cluster is not None:
            await self.core.cluster.aclose()

    @property
    def bus(self) -> EventBus:
        return self.core.bus

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def closing(self) -> bool:
        """True once :meth:`aclose` began (readiness answers 503 from then on)."""
        return self.core.closing

    def observe(self, metrics: Metrics) -> None:
        """Report turns, reservations and cancellations to ``metrics`` from now on."""
        self.core.metrics = metrics

    def stats(self) -> EngineStats:
        """This process's runtime counts, from memory (cheap enough for every scrape)."""
        return EngineStats(len(self.core.runners), self.core.bus.subscriber_count())

    async def queue_depth(self) -> QueueDepth:
        """Queue entries over every session (one database read)."""
        return QueueDepth(*await self.core.store.queue_depth())

    async def create_task(
        self, principal: str, title: str, agent: str | None
    ) -> tuple[Task, Session]:
        title = title.strip()
        if not title or len(title) > 500:
            raise InvalidInput("title must be 1 to 500 characters", ["title"])
        check_content(title, self.core.settings.max_content_bytes, "title")
        return await self.agent_sessions.create(principal, title, agent)

    async def send_message(
        self,
        principal: str,
        session_id: str,
        content: str,
        client_message_id: str | None = None,
        *,
        steer: bool = False,
    ) -> Admission:
        """Start a turn or queue the message (idempotent with a key, Q15); ``steer``: offer it
        to the running turn first (Q16). The answer carries the session and its queue status,
        as the send committed them (a steered message: as read once it is decided)."""
        await self.access.check_session(principal, session_id)
        check_content(content, self.core.settings.max_content_bytes)
        check_client_message_id(client_message_id)
        if not steer:
            return await self.turns.send_message(session_id, content, client_message_id)
        admission = await self.steering.send(session_id, content, client_message_id)
        return replace(
            admission,
            session=await self.access.session(principal, session_id),
            queue=await self.core.queue_status(session_id),
        )

    async def enqueue(
        self,
        principal: str,
        session_id: str,
        content: str,
        expected_revision: int | None,
        client_message_id: str | None = None,
    ) -> Enqueued:
        """Queue the message, then an automatic drain; idempotent with a key (Q15)."""
        await self.access.check_session(principal, session_id)
        check_content(content, self.core.settings.max_content_bytes)
        check_client_message_id(client_message_id)
        return await self.queue.enqueue(
            session_id, content, expected_revision, MessageSource.USER, client_message_id
        )

    async def update_entry(
        self, principal: str, session_id: str, entry_id: str, content: str, expected: int | None
    ) -> QueueStatus:
        await self.access.check_session(principal, session_id)
        check_id(entry_id, "entryId")
        check_content(content, self.core.settings.max_content_bytes)
        return await self.queue.update_entry(session_id, entry_id, content, expected)

    async def remove_entry(
        self, principal: str, session_id: str, entry_id: str, expected: int | None
    ) -> QueueStatus:
        await self.access.check_session(principal, session_id)
        check_id(entry_id, "entryId")
        return await self.queue.remove_entry(session_id, entry_id, expected)

    async def clear_queue(
        self, principal: str, session_id: str, expected: int | None
    ) -> QueueStatus:
        await self.access.check_session(principal, session_id)
        return await self.queue.clear(session_id, expected)

    async def reorder_queue(
        self, principal: str, session_id: str, ordered_ids: Sequence[str], expected: int | None
    ) -> QueueStatus:
        await self.access.check_session(principal, session_id)
        return await self.queue.reorder(session_id, ordered_ids, expected)

    async def answer_approval(
        self, principal: str, approval_id: str, option_id: str
    ) -> tuple[Approval, Session]:
        """A6: answer a pending approval, exactly once (APPROVAL_RESOLVED for the others)."""
        approval = await self.approvals.find(approval_id)
        try:
            await self.authorize_session(principal, approval.session_id, field="approvalId")
        except NotFound:
            raise NotFound("approval", ["approvalId"]) from None  # S2: like a missing one
        answered = await self.approvals.resolve(principal, approval, option_id)
        return answered, await self.authorize_session(principal, approval.session_id)

    async def cancel(self, principal: str, session_id: str) -> CancelResult:
        await self.access.check_session(principal, session_id)
        outcome = await self.cancels.cancel(session_id)
        session = await self.authorize_session(principal, session_id)
        return CancelResult(session, await self.cancellation(session_id), outcome)

    async def set_auto_run(
        self, principal: str, session_id: str, auto_run: bool, expected: int | None
    ) -> Applied:
        await self.access.check_session(principal, session_id)
        return await self.queue.set_auto_run(session_id, auto_run, expected)

    async def send_now(
        self,
        principal: str,
        session_id: str,
        scope: SendNowScope,
        entry_id: str | None,
        expected: int | None,
    ) -> SendNowResult:
        await self.access.check_session(principal, session_id)
        check_id(entry_id, "entryId")
        return await self.queue.send_now(session_id, scope, entry_id, expected)

    async def drain(self, principal: str, session_id: str, expected: int | None) -> Applied:
        await self.access.check_session(principal, session_id)
        return await self.queue.drain(session_id, expected)

    async def answer_clarification(
        self, principal: str, session_id: str, answer: str, clarification_id: str | None
    ) -> Session:
        await self.access.check_session(principal, session_id)
        check_content(answer, self.core.settings.max_content_bytes, "answer")
        check_id(clarification_id, "clarificationId")
        await self.turns.answer_clarification(session_id, answer, clarification_id)
        return await self.authorize_session(principal, session_id)

    async def move_task(self, principal: str, task_id: str, step: str) -> tuple[Task, Session]:
        task = await self.access.task(principal, task_id)
        return await self.workflows.move_task(task, step)
