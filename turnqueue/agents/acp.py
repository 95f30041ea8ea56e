"""The ``acp`` agent profile (SPEC A2, A8, A11): a real coding agent over the Agent Client Protocol.

turnqueue is the ACP *client*. One agent process per session (:mod:`.acp_process`), started when
the session starts (:meth:`AcpAgent.prepare_session`: spawn, ``initialize``, ``authenticate``
when the profile provides for one of the agent's methods, ``session/new`` in ``<workspace>/<task
id>``, all within the profile's start timeout) and reused by every turn (:mod:`.acp_run`).

The process stops after ``idle_timeout`` without a turn, at shutdown, and when it dies or is
killed; the session's next turn starts a fresh one, which continues the agent's own session as
the session's records keep it (A8, :class:`ConversationLog`), on any instance, after a restart
too. When the session ends (:meth:`AcpAgent.close_session`) the agent's session is closed
(``session/close``, when advertised) before its process stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar
from weakref import WeakValueDictionary

from acp import PROTOCOL_VERSION, RequestError, default_environment
from acp.schema import ClientCapabilities, Implementation

from turnqueue.agents.acp_errors import (
    AgentFailure,
    auth_methods,
    failure_of,
    methods_hint,
    start_error,
    usable_method,
)
from turnqueue.agents.acp_process import SEND_TIMEOUT, STOP_GRACE_SECONDS, AcpProcess, spawn
from turnqueue.agents.acp_run import AcpRun, ApprovalHandler
from turnqueue.agents.base import AgentStartError, Bounds, ProcessLog, RunSet, error_text
from turnqueue.agents.profiles import Profile
from turnqueue.domain import (
    AgentAuth,
    AgentConversation,
    AgentErrorKind,
    AuthMethod,
    AuthState,
    ConversationStart,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class ConversationLog(Protocol):
    """Where each session's agent conversation is kept (A8): the session's records (set by the
    engine), else memory. Neither call raises: a read that fails is no conversation."""

    async def conversation(self, session_id: str) -> AgentConversation | None: ...

    async def record(self, conversation: AgentConversation) -> None: ...

    async def release_elsewhere(self, session_id: str) -> None:
        """Stop the session's agent wherever else it runs, before continuing its conversation
        here: an agent may refuse to resume a session another of its processes holds."""


class MemoryConversations:
    """A :class:`ConversationLog` in memory (an agent without an engine)."""

    def __init__(self) -> None:
        self._kept: dict[str, AgentConversation] = {}

    async def conversation(self, session_id: str) -> AgentConversation | None:
        return self._kept.get(session_id)

    async def record(self, conversation: AgentConversation) -> None:
        self._kept[conversation.session_id] = conversation

    async def release_elsewhere(self, session_id: str) -> None:
        pass  # one process: nowhere else


#: The engine's lookup of a session's task id (the task's working directory, A1).
TaskLookup = Callable[[str], Awaitable[str | None]]


class AcpAgent:
    """The ``acp`` profile: one agent process per session (a cache keyed by session id)."""

    def __init__(self, profile: Profile, *, bounds: Bounds | None = None) -> None:
        self.name = profile.name
        self.profile = profile
        self.bounds = bounds if bounds is not None else profile.bounds()
        self.workspace = profile.workspace or Path.cwd() / "workspaces"
        # Set by the engine: who asks a user about a permission request (A6), a session's task
        # (its working directory), the record of process groups (M6) and of conversations (A8).
        self.approvals: ApprovalHandler | None = None
        self.task_of: TaskLookup | None = None
        self.processes: ProcessLog | None = None
        self.conversations: ConversationLog = MemoryConversations()
        self._processes: dict[str, AcpProcess] = {}
        self._cwds: dict[str, Path] = {}
        # Weak: a session's lock lives while a turn or a start holds or awaits it.
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._runs = RunSet()
        self._stopping: set[asyncio.Task[None]] = set()  # idle stops under way
        #: what the agent last said about authentication (A11; ``agents { auth }``)
        self.auth = AgentAuth()
        #: Q16 (``agents { steering }``): false once the agent answered that it has no
        #: ``_session/steering`` (``initialize`` does not say); an agent that takes one resets it.
        self.steering = True

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> AcpRun:
        run = AcpRun(self, prompt, session_id=session_id, turn_id=turn_id, bounds=self.bounds)
        return self._runs.launch(run)

    async def prepare_session(self, session_id: str, task_id: str) -> None:
        """A2: start the session's agent (raises :class:`AgentStartError` with the reason)."""
        self._cwds[session_id] = self.workspace / task_id
        async with self.session_lock(session_id):
            process = await self.ensure(session_id)
            self.idle(session_id, process)

    async def close_session(self, session_id: str) -> None:
        """The session ended: close the agent's session (``session/close``, when its running
        agent advertised it; A8), then stop the agent."""
        process = self._processes.pop(session_id, None)
        self._cwds.pop(session_id, None)
        if process is None:
            return
        conn, agent_session = process.conn, process.acp_session_id
        if process.can_close and conn is not None and agent_session is not None and process.alive:
            try:
                async with asyncio.timeout(SEND_TIMEOUT):
                    await conn.close_session(session_id=agent_session)
                log.info("session %s: closed agent session %s", session_id, agent_session)
            except Exception as exc:
                log.warning(
                    "session %s: session/close of agent session %s failed: %r",
                    session_id,
                    agent_session,
                    exc,
                )
        await self.stop(process)

    async def release_session(self, session_id: str) -> None:
        """Stop the session's agent, not its session: another instance continues it (A8). A
        process serving a turn (there should be none) is left alone."""
        process = self._processes.get(session_id)
        if process is not None and process.run is None:
            await self.stop(process)

    async def aclose(self) -> None:
        await self._runs.aclose()
        processes = list(self._processes.values())
        self._processes.clear()
        await asyncio.gather(*(self.stop(p) for p in processes))
        if self._stopping:
            await asyncio.wait(set(self._stopping))

    def session_lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    def process_of(self, session_id: str) -> int | None:
        """The live process's pid (tests, operators)."""
        process = self._processes.get(session_id)
        return process.pid if process is not None and not process.dead else None

    async def ensure(self, session_id: str) -> AcpProcess:
        """The session's live process, (re)started if need be. Caller holds the session lock."""
        process = self._processes.get(session_id)
        if process is not None and process.alive:
            return process
        if process is not None:
            await self.kill(process)
        cwd = await self._cwd(session_id)
        spawned: AcpProcess | None = None
        try:
            async with asyncio.timeout(self.profile.start_timeout):
                env = {**default_environment(), **self.profile.env}
                spawned = await spawn(self.profile.command, env, cwd)
                if self.processes is not None:
                    await self.processes.started(session_id, spawned.pid)
                await self._open_session(session_id, spawned, cwd)
        except Exception as exc:
            error = await start_error(spawned, exc, self.profile.start_timeout)
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            raise error from exc
        except BaseException:
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            raise
        self._processes[session_id] = spawned
        return spawned

    async def _cwd(self, session_id: str) -> Path:
        cwd = self._cwds.get(session_id)
        if cwd is None:
            task_id = await self.task_of(session_id) if self.task_of is not None else None
            cwd = self.workspace / (task_id or session_id)
            self._cwds[session_id] = cwd
        try:
            cwd.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AgentStartError(f"cannot create the task directory {cwd}: {exc}") from exc
        return cwd

    async def _open_session(self, session_id: str, process: AcpProcess, cwd: Path) -> None:
        """``initialize``, ``authenticate``, then the conversation (A8): the agent's session the
        session's records keep, continued (``session/resume`` when advertised, else
        ``session/load``), else, or when that fails, a new one. The outcome is recorded."""
        conn = process.conn
        assert conn is not None
        init = await self._ask(
            "initialize",
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="turnqueue", version="0.1.0"),
            ),
        )
        caps = init.agent_capabilities
        sessions = caps.session_capabilities if caps is not None else None
        can_resume = sessions is not None and sessions.resume is not None
        can_load = caps is not None and bool(caps.load_session)
        process.can_close = sessions is not None and sessions.close is not None
        await self._authenticate(process, auth_methods(init.auth_methods))
        stored = await self.conversations.conversation(session_id)
        if stored is not None and (can_resume or can_load):
            await self.conversations.release_elsewhere(session_id)
        how, agent_session, error = ConversationStart.NEW, None, None
        where = f"session {session_id}: agent {self.name}"
        method = "session/resume" if can_resume else "session/load" if can_load else None
        if stored is not None and stored.profile == self.name:
            previous = stored.agent_session_id
            try:
                if method is None:
                    log.info("%s advertises no session/resume or session/load", where)
                elif can_resume:
                    await conn.resume_session(session_id=previous, cwd=str(cwd), mcp_servers=[])
                    how, agent_session = ConversationStart.RESUMED, previous
                else:
                    await conn.load_session(cwd=str(cwd), session_id=previous, mcp_servers=[])
                    how, agent_session = ConversationStart.LOADED, previous
            except Exception as exc:
                reason = failure_of(exc).text if isinstance(exc, RequestError) else error_text(exc)
                error = f"{method} failed: {reason}"
                log.warning(
                    "%s: %s of %s failed (%s); starting a new one", where, method, previous, error
                )
            if agent_session is not None:
                log.info("%s continued its session %s (%s)", where, previous, how.value)
        if agent_session is None:
            created = await self._ask("session/new", conn.new_session(cwd=str(cwd), mcp_servers=[]))
            agent_session = created.session_id
            log.info("%s opened a new session %s", where, agent_session)
        process.acp_session_id = agent_session
        await self.conversations.record(
            AgentConversation(
                session_id=session_id,
                profile=self.name,
                agent_session_id=agent_session,
                can_resume=can_resume,
                can_load=can_load,
                can_close=process.can_close,
                resumed=how,
                resume_error=error,
                updated_at=utcnow(),
            )
        )
        if self.auth.state is not AuthState.REFUSED or process.auth_method is not None:
            self._accepted(process)

    async def _authenticate(self, process: AcpProcess, methods: tuple[AuthMethod, ...]) -> None:
        """A11: ``authenticate`` with the method the profile provides for, if any."""
        self.auth = replace(self.auth, methods=methods)
        named = self.profile.auth_method
        if named is not None and methods and named not in {m.id for m in methods}:
            message = f"the profile's auth_method {named!r} is not one of the agent's methods"
            self.refused(message)
            raise AgentStartError(
                f"{message}. {methods_hint(methods)}", kind=AgentErrorKind.AUTHENTICATION
            )
        method = usable_method(methods, self.profile.env, named)
        if method is None:
            return
        assert process.conn is not None
        await self._ask(f"authenticate ({method})", process.conn.authenticate(method_id=method))
        process.auth_method = method

    async def _ask(self, step: str, request: Awaitable[T]) -> T:
        """A request of the start; an error answer becomes the start's reason (A11)."""
        try:
            return await request
        except RequestError as exc:
            failure = failure_of(exc)
            raise AgentStartError(
                self.refusal(f"agent refused {step}", failure), kind=failure.kind
            ) from exc

    def refusal(self, what: str | None, failure: AgentFailure) -> str:
        """``[what: ]<the agent's error>``, and for an authentication refusal the agent's
        methods (A11); the profile's auth state follows."""
        if failure.kind is not AgentErrorKind.AUTHENTICATION:
            return failure.text if what is None else f"{what}: {failure.text}"
        self.refused(failure.message)
        reason = failure.sentence if what is None else f"{what}: {failure.sentence}"
        return f"{reason} {methods_hint(self.auth.methods)}"

    def refused(self, message: str) -> None:
        self.auth = AgentAuth(AuthState.REFUSED, None, self.auth.methods, message)

    def prompt_succeeded(self, process: AcpProcess) -> None:
        """A prompt was answered with some work: an earlier refusal is over. (Claude Code
        answers the prompt after a refusal ``end_turn`` with nothing: that proves nothing.)"""
        if self.auth.state is AuthState.REFUSED:
            self._accepted(process)

    def _accepted(self, process: AcpProcess) -> None:
        state = AuthState.NOT_ASKED if process.auth_method is None else AuthState.AUTHENTICATED
        self.auth = AgentAuth(state, process.auth_method, self.auth.methods)

    async def kill(self, process: AcpProcess) -> None:
        """SIGKILL the group and release the process (a fault, or a turn killed)."""
        await self.stop(process, grace=0)

    async def stop(self, process: AcpProcess, grace: float = STOP_GRACE_SECONDS) -> None:
        """Forget a process, stop it (:meth:`AcpProcess.stop`), record its group gone (M6)."""
        for sid, known in list(self._processes.items()):
            if known is process:
                del self._processes[sid]
        await process.stop(grace)
        if self.processes is not None:
            await self.processes.ended(process.pid)

    def idle(self, session_id: str, process: AcpProcess) -> None:
        """The process has no turn (A2): stop it after the profile's idle timeout."""
        process.cancel_idle()
        if process.dead or self._runs.closed:
            return
        loop = asyncio.get_running_loop()
        process.idle = loop.call_later(
            self.profile.idle_timeout, lambda: self._idle_expired(session_id, process)
        )

    def _idle_expired(self, session_id: str, process: AcpProcess) -> None:
        if self._processes.get(session_id) is process and process.run is None:
            del self._processes[session_id]
            task = asyncio.create_task(self.stop(process), name="acp-idle-stop")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
