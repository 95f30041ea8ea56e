"""The ``acp`` agent profile (SPEC A2-A6): a real coding agent over the Agent Client Protocol.

turnqueue is the ACP *client* (package ``agent-client-protocol``). One agent process per
session, started by :meth:`AcpAgent.prepare_session` when the session starts (spawn,
``initialize``, ``session/new`` in ``<workspace>/<task id>``, all within the profile's start
timeout) and reused for every turn; each turn is one ``session/prompt`` (:mod:`.acp_run`).
The process (:mod:`.acp_process`: its own process group, a minimal environment, stderr drained)
is stopped after ``idle_timeout`` without a turn, at shutdown, and when it dies or is killed;
the session's next turn then starts a fresh one, resuming the agent's own session with
``session/load`` when the agent advertised ``loadSession`` (else a new ``session/new``).

Every ``session/update`` of a turn becomes turn output (:mod:`.acp_updates`); updates outside a
turn (the history ``session/load`` replays) are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from weakref import WeakValueDictionary

from acp import PROTOCOL_VERSION, default_environment
from acp.schema import ClientCapabilities, Implementation

from turnqueue.agents.acp_process import (
    STDERR_TAIL_BYTES,
    STOP_GRACE_SECONDS,
    AcpProcess,
    release,
    spawn,
    tail_suffix,
    terminate,
)
from turnqueue.agents.acp_run import SEND_TIMEOUT, AcpRun, ApprovalHandler, PermissionRequest
from turnqueue.agents.base import AgentStartError, ProcessLog, RunSet
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentType

__all__ = [
    "SEND_TIMEOUT",
    "STDERR_TAIL_BYTES",
    "STOP_GRACE_SECONDS",
    "AcpAgent",
    "AcpRun",
    "ApprovalHandler",
    "PermissionRequest",
    "TaskLookup",
]

log = logging.getLogger(__name__)

#: The engine's lookup of a session's task id (the task's working directory, A1).
TaskLookup = Callable[[str], Awaitable[str | None]]


class AcpAgent:
    """The ``acp`` profile: one agent process per session (a cache keyed by session id)."""

    agent_type = AgentType.ACP

    def __init__(self, profile: Profile, *, workspace: Path | None = None) -> None:
        self.name = profile.name
        self.profile = profile
        self.workspace = profile.workspace or workspace or Path.cwd() / "workspaces"
        #: set by the engine: asks a user about a permission request (A6)
        self.approvals: ApprovalHandler | None = None
        #: set by the engine: the task of a session (its working directory)
        self.task_of: TaskLookup | None = None
        #: set by the engine: records each session's process group (M6)
        self.processes: ProcessLog | None = None
        self._processes: dict[str, AcpProcess] = {}
        self._acp_ids: dict[str, tuple[str, bool]] = {}  # session → (agent's id, loadable)
        self._cwds: dict[str, Path] = {}
        # Weak: a session's lock lives while a turn or a start holds or awaits it.
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._runs = RunSet()
        self._stopping: set[asyncio.Task[None]] = set()  # idle stops under way

    # -- the Agent interface ---------------------------------------------------------------
    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> AcpRun:
        if self._runs.closed:
            raise AgentStartError("agent is closed")
        run = AcpRun(self, prompt, session_id=session_id, turn_id=turn_id)
        run.launch()
        self._runs.add(run)
        return run

    async def prepare_session(self, session_id: str, task_id: str) -> None:
        """A2: start the session's agent (raises :class:`AgentStartError` with the reason)."""
        self._cwds[session_id] = self.workspace / task_id
        async with self.session_lock(session_id):
            process = await self.ensure(session_id)
            self.idle(session_id, process)

    async def close_session(self, session_id: str) -> None:
        """Stop the session's agent (the session ended)."""
        process = self._processes.pop(session_id, None)
        self._acp_ids.pop(session_id, None)
        self._cwds.pop(session_id, None)
        if process is not None:
            await self.stop(process)

    async def aclose(self) -> None:
        await self._runs.aclose()
        processes = list(self._processes.values())
        self._processes.clear()
        await asyncio.gather(*(self.stop(p) for p in processes))
        if self._stopping:
            await asyncio.wait(set(self._stopping))

    def session_lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def process_of(self, session_id: str) -> int | None:
        """The live process's pid (tests, operators)."""
        process = self._processes.get(session_id)
        return process.pid if process is not None and not process.dead else None

    # -- processes -------------------------------------------------------------------------
    async def ensure(self, session_id: str) -> AcpProcess:
        """The session's live process, started (or restarted) if need be. Caller holds the
        session lock."""
        process = self._processes.get(session_id)
        if process is not None and not process.dead and process.proc.returncode is None:
            return process
        if process is not None:
            await self.kill(process)
        cwd = await self._cwd(session_id)
        spawned: AcpProcess | None = None
        try:
            async with asyncio.timeout(self.profile.start_timeout):
                spawned = await self._spawn(cwd)
                if self.processes is not None:
                    await self.processes.started(session_id, spawned.pid)
                await self._open_session(session_id, spawned, cwd)
        except BaseException as exc:
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            if isinstance(exc, TimeoutError):
                raise AgentStartError(
                    f"agent did not start within {self.profile.start_timeout:g} s"
                    + tail_suffix(spawned)
                ) from exc
            if isinstance(exc, Exception) and not isinstance(exc, AgentStartError):
                raise AgentStartError(
                    f"agent could not start: {exc}{tail_suffix(spawned)}"
                ) from exc
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

    async def _spawn(self, cwd: Path) -> AcpProcess:
        env = {**default_environment(), **self.profile.env}
        return await spawn(self.profile.command, env, cwd)

    async def _open_session(self, session_id: str, process: AcpProcess, cwd: Path) -> None:
        conn = process.conn
        assert conn is not None
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="turnqueue", version="0.1.0"),
        )
        caps = init.agent_capabilities
        process.load_supported = bool(caps is not None and caps.load_session)
        previous = self._acp_ids.get(session_id)
        if previous is not None and previous[1] and process.load_supported:
            try:
                # The history it replays arrives outside any turn and is dropped.
                await conn.load_session(cwd=str(cwd), session_id=previous[0], mcp_servers=[])
                process.acp_session_id = previous[0]
            except Exception as exc:
                log.warning("session/load failed (%s); starting a new agent session", exc)
        if process.acp_session_id is None:
            created = await conn.new_session(cwd=str(cwd), mcp_servers=[])
            process.acp_session_id = created.session_id
        self._acp_ids[session_id] = (process.acp_session_id, process.load_supported)

    async def kill(self, process: AcpProcess) -> None:
        """SIGKILL the group and release the process (a fault, or a turn killed)."""
        process.dead = True
        self._cancel_idle(process)
        process.killpg(signal.SIGKILL)
        for sid, known in list(self._processes.items()):
            if known is process:
                del self._processes[sid]
        await release(process)
        await self._ended(process)

    async def stop(self, process: AcpProcess) -> None:
        """Stop a process gently: SIGTERM to the group, SIGKILL after a grace period."""
        process.dead = True
        self._cancel_idle(process)
        await terminate(process)
        await self._ended(process)

    async def _ended(self, process: AcpProcess) -> None:
        if self.processes is not None:
            await self.processes.ended(process.pid)

    # -- idleness (A2) ---------------------------------------------------------------------
    def busy(self, process: AcpProcess) -> None:
        self._cancel_idle(process)

    def idle(self, session_id: str, process: AcpProcess) -> None:
        """The process has no turn: stop it after the profile's idle timeout."""
        self._cancel_idle(process)
        if process.dead or self._runs.closed:
            return
        loop = asyncio.get_running_loop()
        process.idle = loop.call_later(
            self.profile.idle_timeout, lambda: self._idle_expired(session_id, process)
        )

    def _cancel_idle(self, process: AcpProcess) -> None:
        if process.idle is not None:
            process.idle.cancel()
            process.idle = None

    def _idle_expired(self, session_id: str, process: AcpProcess) -> None:
        if self._processes.get(session_id) is process and process.run is None:
            del self._processes[session_id]
            task = asyncio.create_task(self.stop(process), name="acp-idle-stop")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
