"""One turn of an ``acp`` profile (SPEC A3-A6, A9, Q16): one ``session/prompt`` on the session's
agent process (:class:`AcpRun`), run by its agent (:class:`~.acp.AcpAgent`, seen as :class:`Host`).

During the turn, ``session/update`` notifications become its output (:func:`to_output`);
``session/request_permission`` goes to the engine (A6, :data:`ApprovalHandler`) or, without one,
is answered by the profile's policy (:func:`policy_option`). INTERRUPT is ``session/cancel`` and
answers every pending permission request ``cancelled`` (A5); TERMINATE and KILL signal the process
group and mark the process dead, so the next turn gets a fresh one (A4).

Hazards:
- A session's prompts never overlap: its lock is held from a turn's process set-up to the end of
  its prompt, so a turn after an abandoned (killed) one waits for that one to wind down.
- An error answer (A11) fails the turn with the agent's own code and message, classified, and
  keeps the process (it is alive). Only a closed pipe or a dead process is an exit, reported with
  the status the process really had (read before turnqueue kills anything); the process is then
  marked dead so nothing is sent to it again.
- What the agent wrote to stderr during the turn goes with the result, never into its reason.
"""

from __future__ import annotations

import asyncio
import logging
import signal as posix_signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Protocol

from acp import RequestError, text_block
from acp.schema import PermissionOption, ToolCallUpdate

from turnqueue.agents.acp_errors import AgentFailure, describe_exit, failure_of
from turnqueue.agents.acp_process import SEND_TIMEOUT, AcpProcess
from turnqueue.agents.base import (
    POSIX_SIGNALS,
    AgentResult,
    AgentStartError,
    BaseRun,
    Bounds,
    Signal,
    current_cancelling,
    error_text,
    steer_item,
)
from turnqueue.agents.profiles import Profile
from turnqueue.domain import AgentErrorKind, ItemKind, TurnItem
from turnqueue.timeouts import bounded

log = logging.getLogger(__name__)

#: JSON-RPC's "method not found": the agent has no ``_session/steering`` (Q16).
METHOD_NOT_FOUND = -32601

_END_REASONS = {"refusal", "max_tokens", "max_turn_requests"}
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


def policy_option(policy: str, options: Iterable[tuple[str, str, str]]) -> str | None:
    """The first option (id, name, kind) of a kind ``policy`` answers with; None for ``ask``."""
    kinds = POLICY_KINDS.get(policy, ())
    return next((option for option, _, kind in options if kind in kinds), None)


class Host(Protocol):
    """What a run uses of its agent (:class:`~.acp.AcpAgent`)."""

    @property
    def profile(self) -> Profile: ...

    @property
    def approvals(self) -> ApprovalHandler | None: ...

    steering: bool

    def session_lock(self, session_id: str) -> asyncio.Lock: ...

    async def ensure(self, session_id: str) -> AcpProcess: ...

    def idle(self, session_id: str, process: AcpProcess) -> None: ...

    async def kill(self, process: AcpProcess) -> None: ...

    def refusal(self, what: str | None, failure: AgentFailure) -> str: ...

    def prompt_succeeded(self, process: AcpProcess) -> None: ...


class AcpRun(BaseRun):
    """One turn: one ``session/prompt`` on the session's agent process.

    A9: its watchdog is armed when the prompt is sent (the agent's start has its own bound);
    every ``session/update`` is activity, and the clock stands still while a permission
    request waits for its answer."""

    ARMS_ON_LAUNCH = False

    def __init__(
        self,
        agent: Host,
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
            process.cancel_idle()
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
                reason = f"agent error: {error_text(exc)}"
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
        # INTERRUPT is ``session/cancel`` here, never a signal.
        sent = [POSIX_SIGNALS[s] for s in self._sent if s is not Signal.INTERRUPT]
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
            with self.watchdog.paused() if self.watchdog else nullcontext():  # A9: no stall
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
        """Q16: offer ``text`` to the running prompt (the ``_session/steering`` extension of
        Claude Code's and Codex's adapters: ``injected``, ``startedNewTurn`` or ``failed``).
        False (the message is queued instead) when no prompt is under way, the agent has no
        such method or answered ``failed``. Hazard: an answer lost with a dying agent is False
        too, though the message may have reached it; never the other way."""
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


#: The fields of a tool call item (A3); an update carries the subset that changed.
TOOL_FIELDS = ("title", "kind", "status", "content", "locations")


def _text_of(content: Any) -> str | None:
    """The text of a text content block; None for other blocks."""
    if isinstance(content, Mapping) and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else None
    return None


def to_output(update: Mapping[str, Any]) -> str | TurnItem | None:
    """A3: one ``session/update``'s ``update`` as turn output (None for an empty chunk): message
    text as ``str``, else a :class:`TurnItem`. It is read as raw JSON, not the package's models,
    so an update the installed schema cannot validate (a newer agent) is kept whole as RAW."""
    kind = update.get("sessionUpdate")
    if kind == "agent_message_chunk":
        text = _text_of(update.get("content"))
        if text is not None:
            return text or None
    elif kind == "agent_thought_chunk":
        text = _text_of(update.get("content"))
        if text is not None:
            return TurnItem(ItemKind.THOUGHT, {"text": text}) if text else None
    elif kind in ("tool_call", "tool_call_update"):
        call_id = update.get("toolCallId")
        if isinstance(call_id, str) and call_id:
            data: dict[str, Any] = {"toolCallId": call_id}
            if kind == "tool_call":  # the start: every field present (ACP defaults)
                data.update(
                    title=update.get("title", ""),
                    kind=update.get("kind", "other"),
                    status=update.get("status", "pending"),
                    content=update.get("content") or [],
                    locations=update.get("locations") or [],
                )
            else:  # an update: only what it carries
                data.update({f: update[f] for f in TOOL_FIELDS if update.get(f) is not None})
            return TurnItem(ItemKind.TOOL_CALL, data, key=call_id)
    elif kind == "plan":
        entries = update.get("entries")
        if isinstance(entries, list):
            return TurnItem(
                ItemKind.PLAN,
                {
                    "entries": [
                        {
                            "content": e.get("content", ""),
                            "priority": e.get("priority", "medium"),
                            "status": e.get("status", "pending"),
                        }
                        for e in entries
                        if isinstance(e, Mapping)
                    ]
                },
                key="plan",  # a plan update replaces the whole plan (ACP)
            )
    return TurnItem(ItemKind.RAW, dict(update))
