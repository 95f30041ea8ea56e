"""One ACP agent process and its connection: spawn, stderr tail, client callbacks, stop and kill.

The process leads its own process group (signals reach all it spawned) and gets the profile's
environment on top of ``acp.default_environment()``, never the server's whole environment. Its
stderr (the agent's own log, kept apart from any reason turnqueue gives: A11) is drained
continuously, so an agent that logs megabytes never blocks on a full pipe; the last
:data:`STDERR_TAIL_BYTES` are kept with a count of every byte, so a turn can take what was
written while it ran (:meth:`AcpProcess.tail`).

What the agent sends goes to the process's current :class:`Turn`: ``session/update``
notifications as raw messages, in arrival order (a connection observer, before the package
validates them), and ``session/request_permission`` (the process is its connection's client).
With no turn, updates are dropped and permission requests answered ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal as posix_signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from acp import Client
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from turnqueue.agents.base import spawn_errors
from turnqueue.timeouts import bounded, within

STDERR_TAIL_BYTES = 4 * 1024
#: Largest JSON-RPC line read in one piece (longer lines are still read, in pieces).
LINE_LIMIT = 1024 * 1024
#: Seconds a stopping agent gets between SIGTERM and SIGKILL (idle stop, shutdown).
STOP_GRACE_SECONDS = 2.0
#: Seconds to wait for a notification or a short request (``session/cancel``,
#: ``_session/steering``, ``session/close``) to an agent that may not read.
SEND_TIMEOUT = 2.0
#: Terminal escape sequences (colours, cursor moves) in an agent's log.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Silence on stderr after which what a live agent logged with an error answer is taken.
STDERR_QUIET_SECONDS = 0.05


class Turn(Protocol):
    """The turn a process is serving: where the agent's updates and permission requests go."""

    def on_update(self, params: dict[str, Any]) -> None: ...

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """The option to answer, or None for ``cancelled``."""
        ...


@dataclass(eq=False)
class AcpProcess:
    """One live agent process of one session."""

    proc: asyncio.subprocess.Process
    conn: ClientSideConnection | None = None
    acp_session_id: str | None = None
    can_close: bool = False  # the agent advertised ``session/close`` (A8)
    auth_method: str | None = None  # the method it was authenticated with (A11)
    stderr: bytearray = field(default_factory=bytearray)  # the last STDERR_TAIL_BYTES
    stderr_total: int = 0  # bytes ever read from stderr
    stderr_seen: asyncio.Event = field(default_factory=asyncio.Event)  # set on every read
    dead: bool = False
    run: Turn | None = None  # the turn receiving updates
    idle: asyncio.TimerHandle | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Neither marked dead nor exited: it may be sent a request."""
        return not self.dead and self.proc.returncode is None

    def tail(self, since: int = 0) -> str:
        """The stderr tail written after byte ``since`` (a ``stderr_total`` taken earlier),
        without terminal colour codes (codex colours its log)."""
        size = min(len(self.stderr), max(0, self.stderr_total - since))
        text = self.stderr[len(self.stderr) - size :].decode("utf-8", errors="replace")
        return _ANSI.sub("", text).strip()

    async def stderr_quiet(
        self, quiet: float = STDERR_QUIET_SECONDS, bound: float = STOP_GRACE_SECONDS
    ) -> None:
        """Wait (at most ``bound``) for stderr to be silent ``quiet`` seconds: a live agent
        usually logs an error just before or after it answers it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while (left := deadline - loop.time()) > 0:
            self.stderr_seen.clear()
            try:
                await within(self.stderr_seen.wait(), min(quiet, left))
            except TimeoutError:
                return

    async def exit_status(self, timeout: float = STOP_GRACE_SECONDS) -> int | None:
        """The process's own exit status (read before turnqueue kills it), waiting at most
        ``timeout`` for it; None if it still runs. After an exit it also waits (as long) for
        stderr to end, so the tail holds what the process wrote last."""
        if self.proc.returncode is None:
            await bounded(self.proc.wait(), timeout)
        if self.proc.returncode is not None and self.tasks:
            await asyncio.wait({self.tasks[0]}, timeout=timeout)  # tasks[0]: the stderr drain
        return self.proc.returncode

    def cancel_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Mark it dead, SIGTERM the group (unless ``grace`` is 0) and give it ``grace``
        seconds, SIGKILL what is left, close the connection, reap it, stop its tasks."""
        self.cancel_idle()
        self.dead = True
        if grace > 0:
            self.killpg(posix_signal.SIGTERM)
            await bounded(self.proc.wait(), grace)
        self.killpg(posix_signal.SIGKILL)
        if self.conn is not None:
            await bounded(self.conn.close(), STOP_GRACE_SECONDS)
        await bounded(self.proc.wait(), STOP_GRACE_SECONDS)
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    def killpg(self, sig: posix_signal.Signals) -> None:
        # The group id is the leader's pid. Hazard: once the leader is reaped and the group
        # empty, that id could in principle be reused; SIGTERM is sent only while the leader
        # lives, SIGKILL (the last word) also right after its exit, to reach what it left.
        if self.proc.returncode is None or sig is posix_signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def observe(self, event: StreamEvent) -> None:
        """The connection's observer (its reader calls it for every message, in arrival order):
        ``session/update`` notifications go to the turn."""
        message = event.message
        if event.direction is not StreamDirection.INCOMING or "id" in message:
            return
        params = message.get("params")
        if message.get("method") == "session/update" and isinstance(params, dict):
            if self.run is not None:
                self.run.on_update(params)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        """ACP ``session/request_permission``: the current turn answers (none: ``cancelled``)."""
        option = await self.run.permission(tool_call, options) if self.run is not None else None
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=option, outcome="selected")
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass  # updates are taken from the message stream (:meth:`observe`)

    async def drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        with contextlib.suppress(Exception):
            while chunk := await stream.read(65536):
                self.stderr += chunk
                del self.stderr[:-STDERR_TAIL_BYTES]
                self.stderr_total += len(chunk)
                self.stderr_seen.set()

    async def reap(self) -> None:
        """When the leader exits, kill what is left of its group, so the pipes close and the
        connection (and any prompt on it) ends."""
        with contextlib.suppress(Exception):
            await self.proc.wait()
        self.dead = True
        self.killpg(posix_signal.SIGKILL)


async def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> AcpProcess:
    """Start the agent command in ``cwd`` and open its ACP connection (not yet initialised)."""
    with spawn_errors(argv[0]):
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=str(cwd),
            start_new_session=True,
            limit=LINE_LIMIT,
        )
    process = AcpProcess(proc)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    # tasks[0] is the stderr drain (``exit_status`` waits for it).
    process.tasks.append(asyncio.create_task(process.drain_stderr(), name="acp-stderr"))
    process.tasks.append(asyncio.create_task(process.reap(), name="acp-exit"))
    # The process is its connection's client, of only what turnqueue supports (no fs/*,
    # terminal/*: the package answers those "method not found"), hence the cast.
    process.conn = ClientSideConnection(
        cast(Client, process), proc.stdin, proc.stdout, observers=[process.observe]
    )
    return process
