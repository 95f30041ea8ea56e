"""The ``acp`` agent profile (SPEC A2-A6): a real coding agent over the Agent Client Protocol.

turnqueue is the ACP *client* (package ``agent-client-protocol``). One agent process per
session, started by :meth:`AcpAgent.prepare_session` when the session starts (spawn,
``initialize``, ``session/new`` in ``<workspace>/<task id>``, all within the profile's start
timeout) and reused for every turn; each turn is one ``session/prompt`` (:class:`AcpRun`).
When ``initialize`` lists authentication methods and the profile provides what one needs, the
agent is authenticated before ``session/new`` (A11); :attr:`AcpAgent.auth` is what the agent last
said about authentication, and a refusal names the agent's methods (:mod:`.acp_errors`).

The process (:class:`~.acp_process.AcpProcess`: its group, environment and stderr) is stopped
after ``idle_timeout`` without a turn, at shutdown, and when it dies or is killed; the session's
next turn then starts a fresh one, which continues the agent's own session as the session's
records keep it (A8, :class:`ConversationLog`: ``session/resume``, else ``session/load``, else a
new ``session/new``), on this instance or any other, after a restart too. When turnqueue's
session ends (:meth:`AcpAgent.close_session`) the agent's session is closed (``session/close``,
when advertised) before its process stops.

What the agent sends goes to the process's current turn: ``session/update`` notifications, from
the connection's message stream in arrival order (a connection *observer*, before the package
validates them), become turn output (:mod:`.acp_updates`); ``session/request_permission``
(the process's client callbacks) goes to the engine (A6, :data:`ApprovalHandler`) or, without
one, is answered by the profile's policy. With no turn (as while ``session/load`` replays the
history), updates are dropped and permission requests answered ``cancelled``. INTERRUPT is
``session/cancel`` and answers every pending permission request ``cancelled`` (A5); TERMINATE and
KILL signal the process group and mark the process dead, so the next turn gets a fresh one (A4).

Hazards:
- ``session/prompt`` of one session never overlaps another: a per-session lock is held from the
  start of a turn's process set-up to the end of its prompt, so a new turn whose predecessor was
  abandoned (killed) waits for that predecessor to wind down first.
- A stop reason is read only from the prompt's answer. An error answer (A11) fails the turn with
  the agent's own code and message, classified, and keeps the process: it is alive and takes the
  next prompt. Only a closed pipe or a dead process is reported as an exit, with the status the
  process really had (read before turnqueue kills anything), and marks the process dead so
  nothing is sent to it again.
- What the agent wrote to stderr during the turn goes with the result (``AgentResult.stderr``),
  never into its reason.
"""

from __future__ import annotations

import asyncio
import logging
import signal as posix_signal
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar
from weakref import WeakValueDictionary

from acp import PROTOCOL_VERSION, RequestError, default_environment, text_block
from acp.schema import (
    ClientCapabilities,
    Implementation,
    PermissionOption,
    ToolCallUpdate,
)

from turnqueue.agents.acp_errors import (
    AgentFailure,
    auth_methods,
    describe_exit,
    failure_of,
    methods_hint,
    usable_method,
)
from turnqueue.agents.acp_process import STOP_GRACE_SECONDS, AcpProcess, spawn
from turnqueue.agents.acp_updates import to_output
from turnqueue.agents.base import (
    AgentResult,
    AgentStartError,
    BaseRun,
    Bounds,
    ProcessLog,
    RunSet,
    Signal,
    current_cancelling,
    steer_item,
)
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
from turnqueue.timeouts import bounded

log = logging.getLogger(__name__)
T = TypeVar("T")

#: JSON-RPC's "method not found": the agent has no ``_session/steering`` (Q16).
METHOD_NOT_FOUND = -32601

#: Seconds to wait for ``session/cancel`` to be written to an agent that does not read.
SEND_TIMEOUT = 2.0

_END_REASONS = {"refusal", "max_tokens", "max_turn_requests"}
#: The signal a rung of the stop ladder sends a process group.
_POSIX = {Signal.TERMINATE: posix_signal.SIGTERM, Signal.KILL: posix_signal.SIGKILL}
#: The option kinds the ``allow`` and ``reject`` policies answer with, preferred first (A6).
POLICY_KINDS = {"allow": ("allow_once", "allow_always"), "reject": ("reject_once", "reject_always")}


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A ``session/request_permission`` of a turn, for the engine to ask a user (A6)."""

    session_id: str
    turn_id: str
    title: str
    tool_call_id: str | None
    options: tuple[tuple[str, str, str], ...]  # (id, name, kind)
    policy: str = "ask"  # the profile's: ask | allow | reject (the engine applies it)
    timeout: float | None = None  # A10: the profile's approval_timeout (the engine applies it)


#: The engine's handler: answers an option id, or None for ``cancelled``. The agent cancels the
#: awaiting task when the turn is cancelled or ends.
ApprovalHandler = Callable[[PermissionRequest], Awaitable[str | None]]


class AcpRun(BaseRun):
    """One turn: one ``session/prompt`` on the session's agent process.

    A9: its watchdog is armed when the prompt is sent (the agent's start has its own bound);
    every ``session/update`` is activity, and the clock stands still while a permission
    request waits for its answer."""

    ARMS_ON_LAUNCH = False

    def __init__(
        self,
        agent: AcpAgent,
        prompt: str,
        *,
        session_id: str,
        turn_id: str,
        bounds: Bounds | None = None,
    ) -> None:
        super().__init__(f"agent-acp-{turn_id}", bounds)
        self._agent = agent
        self._prompt = prompt
        self.session_id = session_id
        self.turn_id = turn_id
        self._process: AcpProcess | None = None
        self._sent: list[Signal] = []  # INTERRUPT in it: cancelled (A5)
        self._updates = 0  # session/update notifications of this turn
        self._waits: set[asyncio.Future[str | None]] = set()

    async def _run(self) -> AgentResult:
        async with self._agent.session_lock(self.session_id):
            try:
                process = await self._agent.ensure(self.session_id)
            except AgentStartError as exc:
                return AgentResult(ok=False, error=str(exc), error_kind=exc.kind, stderr=exc.stderr)
            self._process = process
            if self._sent:
                self._apply_kill_signals(process)
                return AgentResult(ok=False, error="cancelled before the prompt was sent")
            process.run = self
            self._agent.cancel_idle(process)
            mark = process.stderr_total  # what the agent writes to stderr from here is this turn's
            try:
                result = await self._prompt_once(process)
            finally:
                process.run = None
                self._cancel_waits()
                self._agent.idle(self.session_id, process)
            return replace(result, stderr=process.tail(mark) or None)

    async def _prompt_once(self, process: AcpProcess) -> AgentResult:
        """The prompt's result, its stderr left to the caller."""
        assert process.conn is not None and process.acp_session_id is not None
        if self.watchdog is not None:
            self.watchdog.arm()
        try:
            response = await process.conn.prompt(
                session_id=process.acp_session_id, prompt=[text_block(self._prompt)]
            )
        except RequestError as exc:
            # A11: an answer. The agent is alive; it keeps its process for the next prompt.
            failure = failure_of(exc)
            await process.stderr_quiet()
            error = self._agent.refusal(None, failure)
            return AgentResult(ok=False, error=error, error_kind=failure.kind)
        except Exception as exc:
            if not isinstance(exc, ConnectionError) and not process.dead:
                # Not an exit (e.g. an answer that is not a valid response): the process stays.
                log.warning("turn %s: session/prompt failed: %r", self.turn_id, exc)
                reason = f"agent error: {str(exc) or type(exc).__name__}"
                return AgentResult(ok=False, error=reason, error_kind=AgentErrorKind.INTERNAL)
            return await self._lost(process)
        reason = str(response.stop_reason)
        if reason == "end_turn":
            if self._updates:
                self._agent.prompt_succeeded(process)
            return AgentResult(ok=True)
        if reason == "cancelled":
            return AgentResult(ok=False, error="cancelled")
        error = reason if reason in _END_REASONS else f"stop: {reason}"
        return AgentResult(ok=False, error=error)

    async def _lost(self, process: AcpProcess) -> AgentResult:
        """A4: the process died or closed its pipes mid-turn. Its real exit status is read
        before turnqueue kills what is left; a signal turnqueue sent is named as its own."""
        status = await process.exit_status()
        await self._agent.kill(process)
        sent = [_POSIX[s] for s in self._sent if s in _POSIX]
        reason = describe_exit(status, sent)
        if self._sent:
            reason = f"stopped ({', '.join(s.name for s in self._sent)}): {reason}"
        return AgentResult(ok=False, error=reason, error_kind=AgentErrorKind.AGENT_EXITED)

    def on_update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            return
        self._updates += 1
        self._bump()  # A9: any update is activity, also one that makes no output
        out = to_output(update)
        if out is not None:
            self._emit(out)

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """The option to answer (A6), or None for ``cancelled``."""
        if Signal.INTERRUPT in self._sent:
            return None
        policy = self._agent.profile.permissions
        offered = tuple((o.option_id, o.name, str(o.kind)) for o in options)
        handler = self._agent.approvals
        if handler is None:  # no engine: the policy here (ask: nobody to ask, so cancelled)
            return policy_option(policy, offered)
        request = PermissionRequest(
            session_id=self.session_id,
            turn_id=self.turn_id,
            title=tool_call.title or "permission requested",
            tool_call_id=tool_call.tool_call_id,
            options=offered,
            policy=policy,
            timeout=self._agent.profile.approval_timeout,
        )
        wait: asyncio.Future[str | None] = asyncio.ensure_future(handler(request))
        self._waits.add(wait)
        try:
            if self.watchdog is None:
                return await wait
            with self.watchdog.paused():  # A9: a pending approval is not a stall
                return await wait
        except asyncio.CancelledError:
            if wait.cancelled() and not current_cancelling():
                return None  # cancelled by us (A5): answer ``cancelled``
            raise
        finally:
            self._waits.discard(wait)

    def _cancel_waits(self) -> None:
        for wait in list(self._waits):
            wait.cancel()

    async def steer(self, text: str, entry_id: str) -> bool:
        """Q16: offer ``text`` to the running prompt through the ``_session/steering``
        extension method (Claude Code's and Codex's adapters answer ``injected``,
        ``startedNewTurn`` or ``failed``). False when the prompt is not under way, the agent
        has no such method, or it answered ``failed``: the message is then queued instead.

        Hazard: an answer lost with the agent (it died mid-call) counts as not taken, so a
        message could reach an agent that died and still be queued; never the other way."""
        process = self._process
        if self.done or process is None or process.run is not self or process.conn is None:
            return False
        params = {"sessionId": process.acp_session_id, "prompt": [{"type": "text", "text": text}]}
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                answer = await process.conn.ext_method("session/steering", params)
        except RequestError as exc:
            if exc.code == METHOD_NOT_FOUND:
                self._agent.steering = False
            return False
        except (TimeoutError, ConnectionError, OSError):
            return False
        self._agent.steering = True
        if answer.get("outcome") not in ("injected", "startedNewTurn"):
            return False
        self._emit(steer_item(text, entry_id))
        return True

    async def signal(self, signal: Signal) -> None:
        if self.done:
            return
        if signal not in self._sent:
            self._sent.append(signal)
        process = self._process
        if signal is Signal.INTERRUPT:
            # A5: session/cancel, and every pending permission request answered cancelled.
            self._cancel_waits()
            if process is not None and process.conn is not None and not process.dead:
                if (acp_session := process.acp_session_id) is not None:
                    await bounded(process.conn.cancel(session_id=acp_session), SEND_TIMEOUT)
            return
        if process is not None:
            self._apply_kill_signals(process)

    def _apply_kill_signals(self, process: AcpProcess) -> None:
        process.dead = True  # A4: the next turn gets a fresh process
        sig = posix_signal.SIGKILL if Signal.KILL in self._sent else posix_signal.SIGTERM
        process.killpg(sig)


def policy_option(policy: str, options: Iterable[tuple[str, str, str]]) -> str | None:
    """The first option (id, name, kind) of a kind ``policy`` answers with; None for ``ask``."""
    kinds = POLICY_KINDS.get(policy, ())
    return next((option for option, _, kind in options if kind in kinds), None)


class ConversationLog(Protocol):
    """Where each session's agent conversation is kept (A8). Set by the engine (the session's
    records, shared by every instance); an agent on its own keeps them in memory. Neither call
    raises: a read that fails is no conversation, a write that fails is logged."""

    async def conversation(self, session_id: str) -> AgentConversation | None: ...

    async def record(self, conversation: AgentConversation) -> None: ...

    async def release_elsewhere(self, session_id: str) -> None:
        """Before the conversation is continued here: stop the session's agent wherever else it
        runs (another instance's idle process may hold it open, and an agent may refuse to
        resume a session another of its processes holds: fast-agent does)."""


class MemoryConversations:
    """A :class:`ConversationLog` in this process's memory (an agent without an engine)."""

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
        #: A9: how long a turn's agent may stay silent (the profile's, by default)
        self.bounds = bounds if bounds is not None else profile.bounds()
        self.workspace = profile.workspace or Path.cwd() / "workspaces"
        #: set by the engine: asks a user about a permission request (A6)
        self.approvals: ApprovalHandler | None = None
        #: set by the engine: the task of a session (its working directory)
        self.task_of: TaskLookup | None = None
        #: set by the engine: records each session's process group (M6)
        self.processes: ProcessLog | None = None
        self._processes: dict[str, AcpProcess] = {}
        #: set by the engine: the session's records of its agent conversation (A8)
        self.conversations: ConversationLog = MemoryConversations()
        self._cwds: dict[str, Path] = {}
        # Weak: a session's lock lives while a turn or a start holds or awaits it.
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._runs = RunSet()
        self._stopping: set[asyncio.Task[None]] = set()  # idle stops under way
        #: what the agent last said about authentication (A11; ``agents { auth }``)
        self.auth = AgentAuth()
        #: Q16 (``agents { steering }``): false once the agent answered a steering offer that it
        #: has no ``_session/steering`` method (as this instance saw it; a new process of an
        #: upgraded agent that takes one sets it again). ACP's ``initialize`` does not say.
        self.steering = True

    # -- the Agent interface ---------------------------------------------------------------
    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> AcpRun:
        if self._runs.closed:
            raise AgentStartError("agent is closed")
        run = AcpRun(self, prompt, session_id=session_id, turn_id=turn_id, bounds=self.bounds)
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
        """The session ended: close the agent's session (``session/close``, when its running
        agent advertised it; A8), then stop the agent."""
        process = self._processes.pop(session_id, None)
        self._cwds.pop(session_id, None)
        if process is None:
            return
        conn, agent_session = process.conn, process.acp_session_id
        alive = not process.dead and process.proc.returncode is None
        if process.can_close and conn is not None and agent_session is not None and alive:
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
        """Stop the session's agent without closing the agent's session: another instance
        continues it (A8). A process serving a turn is left alone (none should be: a session's
        turns run on one instance at a time)."""
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
                env = {**default_environment(), **self.profile.env}
                spawned = await spawn(self.profile.command, env, cwd)
                if self.processes is not None:
                    await self.processes.started(session_id, spawned.pid)
                await self._open_session(session_id, spawned, cwd)
        except Exception as exc:
            error = await self._start_error(spawned, exc)
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            raise error from exc
        except BaseException:
            if spawned is not None:
                await asyncio.shield(self.kill(spawned))
            raise
        self._processes[session_id] = spawned
        return spawned

    async def _start_error(self, process: AcpProcess | None, exc: Exception) -> AgentStartError:
        """A2/A11: why the start failed, in the agent's own words where it gave any; its
        stderr apart. Called before turnqueue kills the process, so an exit status is its own."""
        if isinstance(exc, AgentStartError):
            reason, kind = str(exc), exc.kind
            if process is not None:  # a refusal: what it logged with it, too
                await process.stderr_quiet()
        elif isinstance(exc, TimeoutError):
            reason = f"agent did not start within {self.profile.start_timeout:g} s"
            kind = None
        elif process is not None and (
            isinstance(exc, ConnectionError) or process.proc.returncode is not None
        ):
            status = await process.exit_status()
            reason, kind = f"{describe_exit(status)} while starting", AgentErrorKind.AGENT_EXITED
        else:
            reason, kind = f"agent could not start: {exc}", None
        return AgentStartError(
            reason, kind=kind, stderr=process.tail() if process is not None else None
        )

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
        """``initialize``, ``authenticate`` and the conversation (A8): continue the agent's own
        session that the session's records keep (``session/resume`` when advertised, else
        ``session/load``), else, or when that fails, a new ``session/new``. The outcome is
        recorded for the session and logged."""
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
        error: str | None = None
        how, agent_session = ConversationStart.NEW, None
        method = "session/resume" if can_resume else "session/load" if can_load else None
        if stored is not None and stored.profile == self.name:
            previous = stored.agent_session_id
            if method is None:
                log.info(
                    "session %s: agent %s advertises neither session/resume nor session/load; "
                    "its conversation %s is not continued",
                    session_id,
                    self.name,
                    previous,
                )
            else:
                try:
                    if can_resume:
                        await conn.resume_session(session_id=previous, cwd=str(cwd), mcp_servers=[])
                        how = ConversationStart.RESUMED
                    else:
                        await conn.load_session(cwd=str(cwd), session_id=previous, mcp_servers=[])
                        how = ConversationStart.LOADED
                    agent_session = previous
                    log.info(
                        "session %s: agent %s continued its session %s (%s)",
                        session_id,
                        self.name,
                        previous,
                        how.value,
                    )
                except Exception as exc:
                    reason = (
                        failure_of(exc).text
                        if isinstance(exc, RequestError)
                        else str(exc) or type(exc).__name__
                    )
                    error = f"{method} failed: {reason}"
                    log.warning(
                        "session %s: %s of agent session %s failed (%s); starting a new one",
                        session_id,
                        method,
                        previous,
                        error,
                    )
        if agent_session is None:
            created = await self._ask("session/new", conn.new_session(cwd=str(cwd), mcp_servers=[]))
            agent_session = created.session_id
            log.info(
                "session %s: agent %s opened a new session %s", session_id, self.name, agent_session
            )
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
        """Stop a process and forget it: SIGTERM to the group and up to ``grace`` seconds to
        exit (none when ``grace`` is 0), SIGKILL to what is left, then close the connection,
        reap the process and stop its helper tasks."""
        self.cancel_idle(process)
        for sid, known in list(self._processes.items()):
            if known is process:
                del self._processes[sid]
        process.dead = True
        if grace > 0:
            process.killpg(posix_signal.SIGTERM)
            await bounded(process.proc.wait(), grace)
        process.killpg(posix_signal.SIGKILL)
        if process.conn is not None:
            await bounded(process.conn.close(), STOP_GRACE_SECONDS)
        await bounded(process.proc.wait(), STOP_GRACE_SECONDS)
        for task in process.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if self.processes is not None:
            await self.processes.ended(process.pid)

    # -- idleness (A2) ---------------------------------------------------------------------
    def idle(self, session_id: str, process: AcpProcess) -> None:
        """The process has no turn: stop it after the profile's idle timeout."""
        self.cancel_idle(process)
        if process.dead or self._runs.closed:
            return
        loop = asyncio.get_running_loop()
        process.idle = loop.call_later(
            self.profile.idle_timeout, lambda: self._idle_expired(session_id, process)
        )

    def cancel_idle(self, process: AcpProcess) -> None:
        """No idle stop for the process: it serves a turn, or it is being stopped."""
        if process.idle is not None:
            process.idle.cancel()
            process.idle = None

    def _idle_expired(self, session_id: str, process: AcpProcess) -> None:
        if self._processes.get(session_id) is process and process.run is None:
            del self._processes[session_id]
            task = asyncio.create_task(self.stop(process), name="acp-idle-stop")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
