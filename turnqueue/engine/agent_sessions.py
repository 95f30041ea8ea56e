"""Agent profiles as the engine uses them (A1), a task created with its first session, the start
and close of a session's agent (A2, A8), and the rows agents keep through the engine (process
groups, M6; conversations, A8).

A profile whose agent has ``prepare_session`` (``acp``) starts it when the session starts: the
session answers ``STARTING`` meanwhile, then becomes ``WAITING_FOR_INPUT`` (and what was queued
starts, Q4) or ``FAILED`` with the reason (kept in memory, ``Session.agentError``; its stderr
apart, ``Session.agentStderr``, A11).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from typing import Any

from turnqueue.agents import AcpAgent, AgentStartError, agent_profile, error_text, unknown_agent
from turnqueue.bus import EventKind
from turnqueue.domain import AgentConversation, AgentProfile, Session, SessionState, Task
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns

log = logging.getLogger(__name__)

#: Start failures remembered (session id → reason, stderr).
FAILURES_KEPT = 4_096


class AgentSessions:
    def __init__(self, core: Core, turns: Turns) -> None:
        self.core = core
        self.turns = turns
        self.default: str = core.settings.agent
        self._failures: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        # What the agents ask of the engine: a session's task directory and its agent
        # conversation (ACP, A8), and where to record the process groups they run (M6).
        records = ProcessRecords(self.core)
        conversations = ConversationRecords(self.core)
        for agent in self.core.agents.values():
            if isinstance(agent, AcpAgent):
                agent.task_of = self._task_of
                agent.conversations = conversations
            if hasattr(agent, "processes"):
                agent.processes = records

    async def _task_of(self, session_id: str) -> str | None:
        async with self.core.store.read() as tx:
            session = await tx.get_session(session_id)
        return session.task_id if session is not None else None

    def profiles(self) -> list[AgentProfile]:
        return [agent_profile(name, agent) for name, agent in sorted(self.core.agents.items())]

    def failure(self, session_id: str) -> tuple[str | None, str | None]:
        """Why the session's agent could not start, and its stderr (None: it started)."""
        return self._failures.get(session_id, (None, None))

    def close(self, session_id: str, agent_name: str) -> None:
        """The session ended: close its agent's session (``session/close``, when advertised) and
        stop its agent, here and on every other live instance that runs a process of it (a
        request, M4: the agent process belongs to the instance that started it)."""
        if hasattr(self.core.agents.get(agent_name), "close_session"):
            self.core.spawn(self._close(session_id, agent_name), name=f"agent-close:{session_id}")

    async def _close(self, session_id: str, agent_name: str) -> None:
        args = {"s": session_id, "a": agent_name}
        await self.serve_close(args)
        await ask_others(self.core, session_id, "close_agent", args)

    async def serve_release(self, args: dict[str, Any]) -> dict[str, Any]:
        """Stop the session's agent on this instance, its agent session left open: another
        instance is about to continue it (A8, :meth:`ConversationRecords.release_elsewhere`)."""
        for agent in self.core.agents.values():
            if isinstance(agent, AcpAgent):
                await agent.release_session(str(args["s"]))
        return {}

    async def serve_close(self, args: dict[str, Any]) -> dict[str, Any]:
        """Close and stop the session's agent on this instance (asked here or by another)."""
        close = getattr(self.core.agents.get(str(args["a"])), "close_session", None)
        if close is not None:
            await close(str(args["s"]))
        return {}

    async def create(self, principal: str, title: str, agent: str | None) -> tuple[Task, Session]:
        """A task of ``principal`` and its first session, with the profile ``agent`` (None: the
        default; an unknown one is INVALID_INPUT, A1), in the workflow's first step. The session
        answers STARTING while its agent starts (:meth:`start`), else WAITING_FOR_INPUT."""
        agent_name = agent if agent is not None else self.default
        if agent_name not in self.core.agents:
            raise unknown_agent(agent_name, self.core.agents)  # e.g. `command` without a command
        # Not a unit of work: no other writer can know the session yet.
        async with self.core.store.transaction() as tx:
            task = await tx.create_task(
                title=title, owner=principal, workflow_step=self.core.workflow.first.name
            )
            session = await tx.create_session(
                task_id=task.id, agent=agent_name, state=SessionState.CREATED
            )
            session = await tx.set_session_state(session.id, SessionState.STARTING)
        if self.start(session.id, task.id, agent_name):
            return task, session
        async with self.core.store.transaction() as tx:
            session = await tx.set_session_state(session.id, SessionState.WAITING_FOR_INPUT)
            task = await tx.get_task(task.id) or task
            self.core.publish_after(tx, EventKind.SESSION, session.id, session.revision)
        return task, session

    def start(self, session_id: str, task_id: str, agent_name: str) -> bool:
        """Start the session's agent in the background (A2); False when its profile needs none."""
        if not hasattr(self.core.agents[agent_name], "prepare_session"):
            return False
        self.core.spawn(
            self._start(session_id, task_id, agent_name), name=f"agent-start:{session_id}"
        )
        return True

    async def _keep_starting(self, session_id: str) -> None:
        while True:
            await asyncio.sleep(self.core.settings.lease_seconds / 3)
            try:  # not a unit of work: ``updated_at`` only, no revision
                async with self.core.store.transaction() as tx:
                    await tx.touch_starting(session_id)
            except Exception:
                log.exception("could not refresh the start of session %s", session_id)

    async def _start(self, session_id: str, task_id: str, agent_name: str) -> None:
        agent = self.core.agents[agent_name]
        reason: str | None = None
        stderr: str | None = None
        # Hazard: recovery takes a session STARTING for longer than a lease for one a dead
        # instance left behind (and makes it WAITING_FOR_INPUT); a real agent may take longer
        # than that to start, so its updated_at is kept fresh meanwhile.
        keepalive = self.core.spawn(self._keep_starting(session_id), name=f"starting:{session_id}")
        try:
            await agent.prepare_session(session_id, task_id)  # type: ignore[attr-defined]
        except Exception as exc:  # AgentStartError, or anything else: the session FAILED
            reason = error_text(exc)
            stderr = exc.stderr if isinstance(exc, AgentStartError) else None
            log.warning("agent %s of session %s did not start: %s", agent_name, session_id, reason)
            if stderr:
                log.info("stderr of agent %s of session %s:\n%s", agent_name, session_id, stderr)
        finally:
            keepalive.cancel()
        if reason is not None:
            self._failures[session_id] = (reason, stderr)
            while len(self._failures) > FAILURES_KEPT:
                self._failures.popitem(last=False)
        state = SessionState.WAITING_FOR_INPUT if reason is None else SessionState.FAILED
        async with self.core.change(session_id) as c:
            if c.view.session.state is not SessionState.STARTING:
                return  # changed meanwhile (e.g. replaced): leave it
            await c.tx.set_session_state(session_id, state)
            if reason is None:
                after = await c.tx.view(session_id)
                if after is not None:
                    await self.turns.reserve_in(c, after, automatic=True)


async def ask_others(core: Core, session_id: str, op: str, args: dict[str, Any]) -> None:
    """Ask every other live instance that runs an agent process of the session to run ``op``
    (M4: a process belongs to the instance that started it), one at a time. Never raises: an
    instance that does not answer is logged (its lease ends soon, and its agents with it, M6)."""
    cluster = core.cluster
    if cluster is None:
        return
    try:
        async with core.store.read() as tx:
            owners = await tx.process_owners(session_id)
        others = sorted((owners - {core.instance}) & await cluster.live())
    except Exception:
        log.exception("could not find where the agent of session %s runs", session_id)
        return
    timeout = max(5.0, core.settings.lease_seconds)
    for owner in others:
        try:
            await cluster.call(owner, op, args, timeout)
        except Exception as exc:
            log.warning("instance %s: %s of session %s failed: %r", owner, op, session_id, exc)


class ProcessRecords:
    """The agents' :class:`~turnqueue.agents.ProcessLog`: each process group an agent runs is a
    row of this instance on this host (``agent_processes``), deleted once the group is gone;
    recovery kills the groups of instances that died (M6). Not units of work (no queue, no
    revision); a write that fails is logged, never raised into the agent."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.host = socket.gethostname()

    async def started(self, session_id: str, pgid: int) -> None:
        try:
            async with self.core.store.transaction() as tx:
                await tx.record_process(self.host, pgid, self.core.instance, session_id or None)
        except Exception:
            log.exception("could not record the agent process group %d", pgid)

    async def ended(self, pgid: int) -> None:
        try:
            async with self.core.store.transaction() as tx:
                await tx.forget_process(self.host, pgid)
        except Exception:
            log.exception("could not forget the agent process group %d", pgid)


class ConversationRecords:
    """The ACP agents' :class:`~turnqueue.agents.acp.ConversationLog`: each session's agent
    conversation is a row (``agent_conversations``) any instance reads when it starts the
    session's agent again (A8). Not units of work; a read that fails is no conversation (a new
    agent session), a write that fails is logged: neither stops the agent."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def conversation(self, session_id: str) -> AgentConversation | None:
        try:
            async with self.core.store.read() as tx:
                return await tx.conversation(session_id)
        except Exception:
            log.exception("could not read the agent conversation of session %s", session_id)
            return None

    async def record(self, conversation: AgentConversation) -> None:
        try:
            async with self.core.store.transaction() as tx:
                await tx.record_conversation(conversation)
        except Exception:
            log.exception(
                "could not record the agent conversation of session %s", conversation.session_id
            )

    async def release_elsewhere(self, session_id: str) -> None:
        """Ask every other live instance that runs an agent process of the session to stop it
        (``release_agent``, M4). Hazard: an instance that died but whose lease has not ended
        yet still counts as live, and its agent lives until recovery kills it (M6); an agent
        that refuses to resume a session held by that process then starts a new one here."""
        await ask_others(self.core, session_id, "release_agent", {"s": session_id})
