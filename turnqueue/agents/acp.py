"""The ``acp`` agent profile (SPEC A2-A6): a real coding agent over the Agent Client Protocol.

turnqueue is the ACP *client* (package ``agent-client-protocol``). One agent process per
session, started by :meth:`AcpAgent.prepare_session` when the session starts (spawn,
``initialize``, ``session/new`` in ``<workspace>/<task id>``, all within the profile's start
timeout) and reused for every turn; each turn is one ``session/prompt``. The process:

- runs in its own process group (``start_new_session=True``: pgid == pid); TERMINATE and KILL are
  SIGTERM and SIGKILL to the whole group;
- gets the profile's environment on top of a minimal one (``acp.default_environment()``), never
  the server's whole environment;
- has its stderr drained continuously (the last :data:`STDERR_TAIL_BYTES` kept for errors), so
  an agent that writes megabytes of logs never blocks on a full pipe;
- is stopped after ``idle_timeout`` without a turn, at shutdown, and when it dies or is killed;
  the session's next turn then starts a fresh one, resuming the agent's own session with
  ``session/load`` when the agent advertised ``loadSession`` (else a new ``session/new``).

Every ``session/update`` of a turn is read from the connection's message stream in arrival
order (a connection *observer*, before the package validates it) and becomes turn output
(:mod:`.acp_updates`). Updates outside a turn (the history ``session/load`` replays) are dropped.

Hazards:
- ``session/prompt`` of one session never overlaps another: a per-session lock is held from the
  start of a turn's process set-up to the end of its prompt, so a new turn whose predecessor was
  abandoned (killed) waits for that predecessor to wind down first.
- A stop reason is read only from the prompt's answer; a closed pipe or a dead process fails the
  turn with the stderr tail, and marks the process dead so nothing is sent to it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal as posix_signal
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from weakref import WeakValueDictionary

from acp import PROTOCOL_VERSION, Client, default_environment, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from turnqueue.agents.acp_updates import to_output
from turnqueue.agents.base import AgentResult, AgentStartError, BaseRun, RunSet, Signal
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentType

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 4 * 1024
#: Largest JSON-RPC line read in one piece (longer lines are still read, in pieces).
LINE_LIMIT = 1024 * 1024
#: Seconds a stopping agent gets between SIGTERM and SIGKILL (idle stop, shutdown).
STOP_GRACE_SECONDS = 2.0
#: Seconds to wait for ``session/cancel`` to be written to an agent that does not read.
SEND_TIMEOUT = 2.0

_END_REASONS = {"refusal", "max_tokens", "max_turn_requests"}
_ALLOW_KINDS = ("allow_once", "allow_always")
_REJECT_KINDS = ("reject_once", "reject_always")


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A ``session/request_permission`` of a turn, for the engine to ask a user (A6)."""

    session_id: str
    turn_id: str
    title: str
    tool_call_id: str | None
    options: tuple[tuple[str, str, str], ...]  # (id, name, kind)
    policy: str = "ask"  # the profile's: ask | allow | reject (the engine applies it)


#: The engine's handler: answers an option id, or None for ``cancelled``. The agent cancels the
#: awaiting task when the turn is cancelled or ends.
ApprovalHandler = Callable[[PermissionRequest], Awaitable[str | None]]
#: The engine's lookup of a session's task id (the task's working directory, A1).
TaskLookup = Callable[[str], Awaitable[str | None]]


@dataclass(eq=False)
class _Process:
    """One live agent process of one session."""

    proc: asyncio.subprocess.Process
    conn: ClientSideConnection | None = None
    acp_session_id: str | None = None
    load_supported: bool = False
    stderr: deque[bytes] = field(default_factory=deque)
    stderr_size: int = 0
    dead: bool = False
    run: AcpRun | None = None  # the turn receiving updates
    idle: asyncio.TimerHandle | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self) -> str:
        data = b"".join(self.stderr)[-STDERR_TAIL_BYTES:]
        return data.decode("utf-8", errors="replace").strip()

    def killpg(self, sig: posix_signal.Signals) -> None:
        # The group id is the leader's pid. Hazard: once the leader is reaped and the group
        # empty, that id could in principle be reused; SIGTERM is sent only while the leader
        # lives, SIGKILL (the last word) also right after its exit, to reach what it left.
        if self.proc.returncode is None or sig is posix_signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


class AcpRun(BaseRun):
    """One turn: one ``session/prompt`` on the session's agent process."""

    def __init__(self, agent: AcpAgent, prompt: str, *, session_id: str, turn_id: str) -> None:
        super().__init__(f"agent-acp-{turn_id}")
        self._agent = agent
        self._prompt = prompt
        self.session_id = session_id
        self.turn_id = turn_id
        self._process: _Process | None = None
        self._cancelled = False
        self._sent: list[Signal] = []
        self._waits: set[asyncio.Future[str | None]] = set()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _run(self) -> AgentResult:
        async with self._agent.session_lock(self.session_id):
            try:
                process = await self._agent.ensure(self.session_id)
            except AgentStartError as exc:
                return AgentResult(ok=False, error=str(exc))
            self._process = process
            if self._cancelled or Signal.TERMINATE in self._sent or Signal.KILL in self._sent:
                self._apply_kill_signals(process)
                return AgentResult(ok=False, error="cancelled before the prompt was sent")
            process.run = self
            self._agent.busy(process)
            try:
                return await self._prompt_once(process)
            finally:
                process.run = None
                self._cancel_waits()
                self._agent.idle(self.session_id, process)

    async def _prompt_once(self, process: _Process) -> AgentResult:
        assert process.conn is not None and process.acp_session_id is not None
        try:
            response = await process.conn.prompt(
                session_id=process.acp_session_id, prompt=[text_block(self._prompt)]
            )
        except Exception as exc:
            await self._agent.kill(process)
            reason = "agent process exited" if process.proc.returncode is not None else str(exc)
            if process.proc.returncode is not None:
                reason += f" (status {process.proc.returncode})"
            if self._sent:
                reason = f"stopped ({', '.join(s.name for s in self._sent)}): {reason}"
            tail = process.tail()
            return AgentResult(ok=False, error=f"{reason}: {tail}" if tail else reason)
        reason = str(response.stop_reason)
        if reason == "end_turn":
            return AgentResult(ok=True)
        if reason == "cancelled":
            return AgentResult(ok=False, error="cancelled")
        return AgentResult(ok=False, error=reason if reason in _END_REASONS else f"stop: {reason}")

    def on_update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            return
        out = to_output(update)
        if isinstance(out, str):
            self._emit(out)
        elif out is not None:
            self._emit_item(out)

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """The option to answer (A6), or None for ``cancelled``."""
        if self._cancelled:
            return None
        policy = self._agent.profile.permissions
        handler = self._agent.approvals
        if handler is None:  # no engine (the agent on its own): the policy here
            if policy == "ask":
                return None  # nobody to ask: the request is answered cancelled
            kinds = _ALLOW_KINDS if policy == "allow" else _REJECT_KINDS
            chosen = next((o for o in options if o.kind in kinds), None)
            return chosen.option_id if chosen is not None else None
        request = PermissionRequest(
            session_id=self.session_id,
            turn_id=self.turn_id,
            title=tool_call.title or "permission requested",
            tool_call_id=tool_call.tool_call_id,
            options=tuple((o.option_id, o.name, str(o.kind)) for o in options),
            policy=policy,
        )
        wait: asyncio.Future[str | None] = asyncio.ensure_future(handler(request))
        self._waits.add(wait)
        try:
            return await wait
        except asyncio.CancelledError:
            if wait.cancelled() and not _current_cancelling():
                return None  # cancelled by us (A5): answer ``cancelled``
            raise
        finally:
            self._waits.discard(wait)

    def _cancel_waits(self) -> None:
        for wait in list(self._waits):
            wait.cancel()

    async def signal(self, signal: Signal) -> None:
        if self.done:
            return
        if signal not in self._sent:
            self._sent.append(signal)
        process = self._process
        if signal is Signal.INTERRUPT:
            # A5: session/cancel, and every pending permission request answered cancelled.
            self._cancelled = True
            self._cancel_waits()
            if process is not None and process.conn is not None and not process.dead:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(SEND_TIMEOUT):
                        assert process.acp_session_id is not None
                        await process.conn.cancel(session_id=process.acp_session_id)
            return
        if process is not None:
            self._apply_kill_signals(process)

    def _apply_kill_signals(self, process: _Process) -> None:
        process.dead = True  # A4: the next turn gets a fresh process
        sig = posix_signal.SIGKILL if Signal.KILL in self._sent else posix_signal.SIGTERM
        process.killpg(sig)


def _current_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Client:
    """The ACP client side of one process: permission requests go to its current turn."""

    def __init__(self, process: _Process) -> None:
        self._process = process

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        run = self._process.run
        option = await run.permission(tool_call, options) if run is not None else None
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=option, outcome="selected")
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Updates are taken from the message stream (see :meth:`AcpAgent._observe`)."""

    def on_connect(self, conn: Any) -> None:
        pass


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
        self._processes: dict[str, _Process] = {}
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
    async def ensure(self, session_id: str) -> _Process:
        """The session's live process, started (or restarted) if need be. Caller holds the
        session lock."""
        process = self._processes.get(session_id)
        if process is not None and not process.dead and process.proc.returncode is None:
            return process
        if process is not None:
            await self.kill(process)
        cwd = await self._cwd(session_id)
        spawned: _Process | None = None
        try:
            async with asyncio.timeout(self.profile.start_timeout):
                spawned = await self._spawn(cwd)
                await self._open_session(session_id, spawned, cwd)
        except BaseException as exc:
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            if isinstance(exc, TimeoutError):
                raise AgentStartError(
                    f"agent did not start within {self.profile.start_timeout:g} s"
                    + _tail_suffix(spawned)
                ) from exc
            if isinstance(exc, Exception) and not isinstance(exc, AgentStartError):
                raise AgentStartError(
                    f"agent could not start: {exc}{_tail_suffix(spawned)}"
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

    async def _spawn(self, cwd: Path) -> _Process:
        argv = self.profile.command
        env = {**default_environment(), **self.profile.env}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=str(cwd),
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        except FileNotFoundError as exc:
            raise AgentStartError(f"agent command not found: {argv[0]}") from exc
        except PermissionError as exc:
            raise AgentStartError(f"agent command is not executable: {argv[0]}") from exc
        except OSError as exc:
            raise AgentStartError(f"cannot start agent command {argv[0]}: {exc}") from exc
        process = _Process(proc)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        process.tasks.append(asyncio.create_task(self._drain_stderr(process), name="acp-stderr"))
        process.tasks.append(asyncio.create_task(self._watch(process), name="acp-exit"))
        # _Client implements only what turnqueue supports (no fs/*, terminal/*: the package
        # answers those "method not found"), hence the cast to the full protocol.
        client = cast(Client, _Client(process))
        process.conn = ClientSideConnection(
            client, proc.stdin, proc.stdout, observers=[self._observer(process)]
        )
        return process

    async def _open_session(self, session_id: str, process: _Process, cwd: Path) -> None:
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

    def _observer(self, process: _Process) -> Callable[[StreamEvent], None]:
        def observe(event: StreamEvent) -> None:
            # Called by the connection's reader for every message, in arrival order.
            message = event.message
            if event.direction is not StreamDirection.INCOMING:
                return
            if message.get("method") != "session/update" or "id" in message:
                return
            run = process.run
            params = message.get("params")
            if run is not None and isinstance(params, dict):
                run.on_update(params)

        return observe

    async def _drain_stderr(self, process: _Process) -> None:
        stream = process.proc.stderr
        assert stream is not None
        with contextlib.suppress(Exception):
            while chunk := await stream.read(65536):
                process.stderr.append(chunk)
                process.stderr_size += len(chunk)
                while process.stderr_size - len(process.stderr[0]) >= STDERR_TAIL_BYTES:
                    process.stderr_size -= len(process.stderr.popleft())

    async def _watch(self, process: _Process) -> None:
        """When the leader exits, kill what is left of its group, so the pipes close and the
        connection (and any prompt on it) ends."""
        with contextlib.suppress(Exception):
            await process.proc.wait()
        process.dead = True
        process.killpg(posix_signal.SIGKILL)

    async def kill(self, process: _Process) -> None:
        """SIGKILL the group and release the process (a fault, or a turn killed)."""
        process.dead = True
        self._cancel_idle(process)
        process.killpg(posix_signal.SIGKILL)
        for sid, known in list(self._processes.items()):
            if known is process:
                del self._processes[sid]
        await self._release(process)

    async def stop(self, process: _Process) -> None:
        """Stop a process gently: SIGTERM to the group, SIGKILL after a grace period."""
        process.dead = True
        self._cancel_idle(process)
        process.killpg(posix_signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE_SECONDS):
                await process.proc.wait()
        except TimeoutError:
            pass
        process.killpg(posix_signal.SIGKILL)
        await self._release(process)

    async def _release(self, process: _Process) -> None:
        if process.conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(STOP_GRACE_SECONDS):
                    await process.conn.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_GRACE_SECONDS):
                await process.proc.wait()
        for task in process.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    # -- idleness (A2) ---------------------------------------------------------------------
    def busy(self, process: _Process) -> None:
        self._cancel_idle(process)

    def idle(self, session_id: str, process: _Process) -> None:
        """The process has no turn: stop it after the profile's idle timeout."""
        self._cancel_idle(process)
        if process.dead or self._runs.closed:
            return
        loop = asyncio.get_running_loop()
        process.idle = loop.call_later(
            self.profile.idle_timeout, lambda: self._idle_expired(session_id, process)
        )

    def _cancel_idle(self, process: _Process) -> None:
        if process.idle is not None:
            process.idle.cancel()
            process.idle = None

    def _idle_expired(self, session_id: str, process: _Process) -> None:
        if self._processes.get(session_id) is process and process.run is None:
            del self._processes[session_id]
            task = asyncio.create_task(self.stop(process), name="acp-idle-stop")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)


def _tail_suffix(process: _Process | None) -> str:
    tail = process.tail() if process is not None else ""
    return f": {tail}" if tail else ""
