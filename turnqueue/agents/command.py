"""The ``command`` agent profile (SPEC §2): one process per turn.

``TURNQUEUE_AGENT_COMMAND`` is split with :func:`shlex.split` and executed directly — **no shell**,
so a missing or non-executable program makes ``start`` raise :class:`AgentStartError` instead of
becoming a shell's exit status 127. Wrap it yourself (``sh -c '…'``) to get pipes or expansions.

Per turn the process
- runs in its own session and so its own process group (``start_new_session=True``), whose id is
  its pid: every signal goes to the whole group (``os.killpg``), helpers it spawned included;
- gets the prompt (UTF-8) on stdin, which is then closed; a process that never reads it is fine;
- inherits the server's environment plus ``TURNQUEUE_SESSION_ID`` and ``TURNQUEUE_TURN_ID``;
- has each stdout line streamed as one chunk, newline kept; a line longer than ``max_chunk_chars``
  is streamed in pieces of that size, so memory stays bounded whatever it prints;
- has the last ``stderr_tail_bytes`` of stderr kept for the error message.

The turn ends when that process exits; whatever is left in its group is then SIGKILLed. Exit
status 0 completes the turn; anything else fails it with ``"exit status 3: <stderr tail>"`` or
``"killed by SIGTERM: …"``, prefixed with ``"interrupted (SIGINT, …)"`` when the engine had
signalled the run. INTERRUPT, TERMINATE and KILL are SIGINT, SIGTERM and SIGKILL to the group.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shlex
import signal as posix_signal
from asyncio.subprocess import PIPE, Process

from turnqueue.agents.base import AgentResult, AgentStartError, BaseRun, RunSet, Signal

READ_SIZE = 64 * 1024
MAX_CHUNK_CHARS = 16 * 1024
STDERR_TAIL_BYTES = 4 * 1024
#: After the process exited and its group was killed, how long to wait for its pipes to reach EOF.
DRAIN_SECONDS = 1.0

_POSIX = {
    Signal.INTERRUPT: posix_signal.SIGINT,
    Signal.TERMINATE: posix_signal.SIGTERM,
    Signal.KILL: posix_signal.SIGKILL,
}


def parse_command(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise AgentStartError(f"agent command cannot be parsed: {exc}") from exc
    if not argv:
        raise AgentStartError("no agent command configured (TURNQUEUE_AGENT_COMMAND is empty)")
    return argv


class CommandRun(BaseRun):
    def __init__(
        self, proc: Process, prompt: str, *, turn_id: str, max_chunk_chars: int, stderr_tail: int
    ) -> None:
        super().__init__(f"agent-command-{turn_id}")
        self._proc = proc
        # start_new_session=True made the child a session and group leader: pgid == pid.
        self._pgid = proc.pid
        self._prompt = prompt.encode("utf-8")
        self._max_chunk = max_chunk_chars
        self._stderr_limit = stderr_tail
        self._stderr = bytearray()
        self._sent: list[Signal] = []
        self._group_killed = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def signal(self, signal: Signal) -> None:
        # Hazard: the group id is the leader's pid. Once the group got its final SIGKILL it may be
        # empty and the id free for reuse, so we stay silent. Between the child watcher reaping the
        # leader and _finish running there is a window of a few loop iterations in which an empty
        # group's id could in theory be reused; that needs the pid space to wrap, and is accepted.
        if self._group_killed:
            return
        if signal not in self._sent:
            self._sent.append(signal)
        self._killpg(_POSIX[signal])

    def _killpg(self, sig: posix_signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group is already gone
            os.killpg(self._pgid, sig)

    async def _run(self) -> AgentResult:
        helpers = [
            asyncio.create_task(self._feed_stdin(), name=f"{self._task_name}-stdin"),
            asyncio.create_task(self._pump_stdout(), name=f"{self._task_name}-stdout"),
            asyncio.create_task(self._pump_stderr(), name=f"{self._task_name}-stderr"),
        ]
        try:
            returncode = await self._proc.wait()
        finally:
            await self._finish(helpers)
        return self._result(returncode)

    async def _finish(self, helpers: list[asyncio.Task[None]]) -> None:
        """Kill what is left of the group, reap the leader, drain the pipes, end the helpers."""
        self._killpg(posix_signal.SIGKILL)
        self._group_killed = True
        if self._proc.returncode is None:  # only when we are being cancelled (aclose)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._proc.wait(), DRAIN_SECONDS)
        # Hazard: a descendant that left the group (setsid) survives the SIGKILL and may hold
        # stdout open forever, so the drain is bounded; then the pumps are cancelled.
        _, pending = await asyncio.wait(helpers, timeout=DRAIN_SECONDS)
        for task in pending:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)

    def _result(self, returncode: int) -> AgentResult:
        if returncode == 0:
            return AgentResult(ok=True)
        if returncode < 0:
            try:
                reason = f"killed by {posix_signal.Signals(-returncode).name}"
            except ValueError:
                reason = f"killed by signal {-returncode}"
        else:
            reason = f"exit status {returncode}"
        if self._sent:
            names = ", ".join(_POSIX[s].name for s in self._sent)
            reason = f"interrupted ({names}): {reason}"
        tail = self._stderr.decode("utf-8", errors="replace").strip()
        return AgentResult(ok=False, error=f"{reason}: {tail}" if tail else reason)

    async def _feed_stdin(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        # A separate task: a prompt larger than the pipe buffer blocks until the child reads it,
        # and a child that never reads must still be able to run and exit.
        try:
            stdin.write(self._prompt)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited (or closed stdin) without reading everything: its choice
        finally:
            stdin.close()
            with contextlib.suppress(OSError):
                await stdin.wait_closed()

    async def _pump_stdout(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while data := await stdout.read(READ_SIZE):
            pending = self._emit_lines(pending + decoder.decode(data))
        rest = pending + decoder.decode(b"", final=True)
        for start in range(0, len(rest), self._max_chunk):
            self._emit(rest[start : start + self._max_chunk])

    def _emit_lines(self, text: str) -> str:
        """Emit every complete line (and over-long pieces) of ``text``; return the remainder."""
        start = 0
        while True:
            newline = text.find("\n", start, start + self._max_chunk)
            if newline >= 0:
                self._emit(text[start : newline + 1])
                start = newline + 1
            elif len(text) - start >= self._max_chunk:
                self._emit(text[start : start + self._max_chunk])
                start += self._max_chunk
            else:
                return text[start:]

    async def _pump_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while data := await stderr.read(READ_SIZE):
            self._stderr += data
            del self._stderr[: -self._stderr_limit]


class CommandAgent:
    """The ``command`` profile: runs ``command`` once per turn."""

    name = "command"

    def __init__(
        self,
        command: str,
        *,
        max_chunk_chars: int = MAX_CHUNK_CHARS,
        stderr_tail_bytes: int = STDERR_TAIL_BYTES,
    ) -> None:
        if max_chunk_chars <= 0 or stderr_tail_bytes <= 0:
            raise ValueError("max_chunk_chars and stderr_tail_bytes must be positive")
        self.command = command
        self._max_chunk = max_chunk_chars
        self._stderr_tail = stderr_tail_bytes
        self._runs = RunSet()

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> CommandRun:
        if self._runs.closed:
            raise AgentStartError("agent is closed")
        argv = parse_command(self.command)
        env = {**os.environ, "TURNQUEUE_SESSION_ID": session_id, "TURNQUEUE_TURN_ID": turn_id}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=env,
                start_new_session=True,
                limit=READ_SIZE,
            )
        except FileNotFoundError as exc:
            raise AgentStartError(f"agent command not found: {argv[0]}") from exc
        except PermissionError as exc:
            raise AgentStartError(f"agent command is not executable: {argv[0]}") from exc
        except OSError as exc:
            raise AgentStartError(f"cannot start agent command {argv[0]}: {exc}") from exc
        run = CommandRun(
            proc,
            prompt,
            turn_id=turn_id,
            max_chunk_chars=self._max_chunk,
            stderr_tail=self._stderr_tail,
        )
        run.launch()
        self._runs.add(run)
        return run

    async def aclose(self) -> None:
        await self._runs.aclose()
