"""The ``command`` agent profile (SPEC §2): one process per turn.

``TURNQUEUE_AGENT_COMMAND`` is split with :func:`shlex.split` and run with **no shell**, so a
missing or non-executable program makes ``start`` raise :class:`AgentStartError` (not a shell's
status 127); ``sh -c '…'`` gives pipes and expansions. The process leads its own process group,
which every signal reaches; it gets the prompt (UTF-8) on stdin, then EOF, and the server's
environment plus ``TURNQUEUE_SESSION_ID`` and ``TURNQUEUE_TURN_ID``. Each stdout line is one
chunk (newline kept; a longer line than ``max_chunk_chars`` comes in pieces), and the last
``stderr_tail_bytes`` of stderr are kept apart from the error (A11).

The turn ends when the process exits; what is left of its group is then SIGKILLed. Status 0
completes the turn; anything else fails it (``"exit status 3"``, ``"killed by SIGTERM"``, after
``"interrupted (SIGINT, …): "`` when the engine signalled it). INTERRUPT, TERMINATE and KILL are
SIGINT, SIGTERM and SIGKILL to the group.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shlex
import signal as posix_signal
from asyncio.subprocess import PIPE
from collections.abc import Callable
from typing import cast

from turnqueue.agents.base import (
    POSIX_SIGNALS,
    AgentResult,
    AgentStartError,
    BaseRun,
    Bounds,
    ProcessLog,
    RunSet,
    Signal,
    spawn_errors,
)
from turnqueue.timeouts import bounded

MAX_CHUNK_CHARS = 16 * 1024
STDERR_TAIL_BYTES = 4 * 1024
#: After the process exited and its group was killed, how long to wait for its pipes to reach EOF.
DRAIN_SECONDS = 1.0


def parse_command(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise AgentStartError(f"agent command cannot be parsed: {exc}") from exc
    if not argv:
        raise AgentStartError("no agent command configured (TURNQUEUE_AGENT_COMMAND is empty)")
    return argv


class _Output:
    """Splits a byte stream into chunks: one per line (newline kept), none over ``max_chunk``."""

    def __init__(self, emit: Callable[[str], None], max_chunk: int) -> None:
        self._emit = emit
        self._max = max_chunk
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # never more than one read plus ``max_chunk`` characters

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        start = 0
        while True:
            newline = text.find("\n", start, start + self._max)
            if newline >= 0:
                self._emit(text[start : newline + 1])
                start = newline + 1
            elif len(text) - start >= self._max:
                self._emit(text[start : start + self._max])
                start += self._max
            else:
                break
        self._pending = text[start:]

    def end(self) -> None:
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        for start in range(0, len(rest), self._max):
            self._emit(rest[start : start + self._max])


class CommandRun(BaseRun, asyncio.SubprocessProtocol):
    """One turn's process, and its own subprocess protocol: output is pushed as it arrives,
    so the process never blocks on a full pipe, whatever the reader does.

    Hazard: ``asyncio.subprocess.Process.wait()`` (3.11) resolves only once every pipe is closed,
    which a grandchild holding stdout delays past the exit. So the exit is taken from
    ``process_exited``, the group killed right then, and only then are the pipes awaited
    (boundedly)."""

    def __init__(
        self,
        prompt: str,
        *,
        turn_id: str,
        max_chunk_chars: int,
        stderr_tail: int,
        session_id: str = "",
        processes: ProcessLog | None = None,
        bounds: Bounds | None = None,
    ) -> None:
        BaseRun.__init__(self, f"agent-command-{turn_id}", bounds)
        self._session_id = session_id
        self._processes = processes
        self._prompt = prompt.encode("utf-8")
        self._stdout = _Output(self._emit, max_chunk_chars)
        self._stderr_limit = stderr_tail
        self._stderr = bytearray()
        self._sent: list[Signal] = []
        self._group_killed = False
        self._transport: asyncio.SubprocessTransport | None = None
        self._pid: int | None = None
        self._exited = asyncio.Event()
        self._stdout_closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Called once, before subprocess_exec returns and before any other callback of this
        # protocol (asyncio and uvloop both defer pipe data and the exit until it has run).
        # Hazard: uvloop's transport (``turnqueue serve`` runs on uvloop) and its pipes have
        # asyncio's methods but not its base classes: typed by a cast, never isinstance-checked.
        process = cast(asyncio.SubprocessTransport, transport)
        self._transport = process
        self._pid = process.get_pid()
        stdin = cast(asyncio.WriteTransport | None, process.get_pipe_transport(0))
        if stdin is None:  # stdin=PIPE always gives one; no pipe means nothing to send
            return
        # write() buffers what the pipe does not take now; close() flushes it, then closes, so
        # a child that reads later gets all of it and EOF; one that never reads is not blocked.
        stdin.write(self._prompt)
        stdin.close()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._stdout.feed(data)
        elif fd == 2:
            self._stderr += data
            del self._stderr[: -self._stderr_limit]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._stdout.end()
            self._stdout_closed.set()

    def process_exited(self) -> None:
        # Kill the rest of the group in the very callback that reports the exit (see signal()).
        self._kill_group()
        self._exited.set()

    @property
    def pid(self) -> int:
        if self._pid is None:
            raise RuntimeError("process not started")
        return self._pid

    async def signal(self, signal: Signal) -> None:
        # Hazard: the group id is the leader's pid. Once the group got its final SIGKILL it may be
        # empty and its id free for reuse, so we stay silent. Before that, the leader is alive, a
        # zombie, or reaped by the child watcher an instant ago (process_exited, which kills the
        # group, is its next callback): too short a time for the pid to be handed out again.
        if self._group_killed:
            return
        if signal not in self._sent:
            self._sent.append(signal)
        self._killpg(POSIX_SIGNALS[signal])

    def _kill_group(self) -> None:
        if not self._group_killed:
            self._killpg(posix_signal.SIGKILL)
            self._group_killed = True

    def _killpg(self, sig: posix_signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group is already gone
            os.killpg(self.pid, sig)  # start_new_session=True: pgid == pid

    async def _run(self) -> AgentResult:
        transport = self._transport
        assert transport is not None  # connection_made ran before start() launched the run
        try:
            if self._processes is not None:  # recorded before its end is (same task)
                await self._processes.started(self._session_id, self.pid)
            await self._exited.wait()
            # Hazard: a descendant that left the group (setsid) survives the SIGKILL and may hold
            # stdout open forever, so the drain is bounded; closing the transport ends it.
            await bounded(self._stdout_closed.wait(), DRAIN_SECONDS)
        finally:
            # Normally a no-op kill (done on exit); when aclose cancels us, the only one. Closing
            # the transport also SIGKILLs the leader if it still runs, and frees the pipes.
            self._kill_group()
            transport.close()
            self._stdout.end()
            if self._processes is not None:
                await self._processes.ended(self.pid)  # the group is gone (M6)
        returncode = transport.get_returncode()
        assert returncode is not None  # process_exited ran, and is only called once it is set
        return self._result(returncode)

    def _result(self, returncode: int) -> AgentResult:
        tail = self._stderr.decode("utf-8", errors="replace").strip() or None
        if returncode == 0:
            return AgentResult(ok=True, stderr=tail)
        if returncode < 0:
            try:
                reason = f"killed by {posix_signal.Signals(-returncode).name}"
            except ValueError:
                reason = f"killed by signal {-returncode}"
        else:
            reason = f"exit status {returncode}"
        if self._sent:
            names = ", ".join(POSIX_SIGNALS[s].name for s in self._sent)
            reason = f"interrupted ({names}): {reason}"
        return AgentResult(ok=False, error=reason, stderr=tail)


class CommandAgent:
    """The ``command`` profile: runs ``command`` once per turn."""

    name = "command"

    def __init__(
        self,
        command: str,
        *,
        max_chunk_chars: int = MAX_CHUNK_CHARS,
        stderr_tail_bytes: int = STDERR_TAIL_BYTES,
        bounds: Bounds | None = None,
    ) -> None:
        if max_chunk_chars <= 0 or stderr_tail_bytes <= 0:
            raise ValueError("max_chunk_chars and stderr_tail_bytes must be positive")
        self.command = command
        self._max_chunk = max_chunk_chars
        self._stderr_tail = stderr_tail_bytes
        self.bounds = bounds  # A9: a process that prints nothing for that long is killed
        self._runs = RunSet()
        #: set by the engine: records each turn's process group (M6)
        self.processes: ProcessLog | None = None

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> CommandRun:
        if self._runs.closed:
            raise AgentStartError("agent is closed")
        argv = parse_command(self.command)
        env = {**os.environ, "TURNQUEUE_SESSION_ID": session_id, "TURNQUEUE_TURN_ID": turn_id}
        run = CommandRun(
            prompt,
            turn_id=turn_id,
            max_chunk_chars=self._max_chunk,
            stderr_tail=self._stderr_tail,
            session_id=session_id,
            processes=self.processes,
            bounds=self.bounds,
        )
        loop = asyncio.get_running_loop()
        with spawn_errors(argv[0]):
            await loop.subprocess_exec(
                lambda: run,
                *argv,
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=env,
                start_new_session=True,
            )
        run.launch()
        self._runs.add(run)
        return run

    async def aclose(self) -> None:
        await self._runs.aclose()
