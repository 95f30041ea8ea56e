"""A fake ACP agent written on the ``agent-client-protocol`` package (SPEC A7).

Run as ``python fake_acp_agent.py`` (stdio). The prompt's first word selects the behaviour:

- anything else: a plain reply, ``"echo: <prompt>"`` in two message chunks, ``end_turn``;
- ``/whoami``: replies ``pid=<pid> session=<agent session id> loaded=<0|1>
  auth=<authenticated method | -> cwd=<cwd>``;
- ``/count``: replies ``count=<n>`` (see Conversations below);
- ``/helper``: starts a child process in its process group that outlives it (as an MCP server
  would) and replies ``helper=<pid>``;
- ``/tool``: a tool call (pending), its updates (in_progress, then completed with content and a
  location), then a message;
- ``/plan``: a plan of two entries, then the same plan with the first one completed;
- ``/thought``: a thought chunk, then a message;
- ``/raw``: an update kind turnqueue does not know (``available_commands_update``);
- ``/permission``: asks for permission (allow / reject options) about a tool call and replies
  ``permission: <option id | cancelled>``; a cancelled answer ends the prompt ``cancelled``;
- ``/refusal``, ``/max_tokens``, ``/max_turn_requests``: that stop reason;
- ``/slow``: streams a chunk every 50 ms for a minute; honours ``session/cancel`` (``cancelled``);
- ``/fifo PATH``: the test is the agent: every line written to the named pipe at ``PATH`` is a
  JSON value, a string sent as one message chunk, ``{"tool": …}`` / ``{"plan": …}`` /
  ``{"thought": …}`` as that update (see ``_fifo_update``), ``"/permission"`` asks as above,
  ``null`` ends the turn; honours ``session/cancel``;
- ``/steps N [S]``: N steps S seconds apart (default 0.04), each a plan update (that step in
  progress), a tool call (``step-<i>``, pending then completed) and a message chunk
  ``step <i> ``; a final plan with every step completed; honours ``session/cancel``;
- ``/deaf``: ignores ``session/cancel`` (SIGTERM still ends it);
- ``/stubborn``: ignores ``session/cancel`` and SIGTERM (only SIGKILL ends it);
- ``/crash``: writes to stderr and exits with status 3 in the middle of the turn;
- ``/crash-permission``: asks for permission, then exits while the request is pending;
- ``/stderr``: writes 5 MB to stderr, then replies;
- ``/bigline``: one message chunk of 64 KiB (a JSON-RPC line longer than 64 KiB);
- ``/exit``: replies ``bye pid=<pid>``, then exits after the turn (the next prompt needs a
  fresh process);
- ``/error-auth``: logs the error to stderr (as Claude Code does), then answers the prompt with
  JSON-RPC error -32000 "Authentication required" and stays alive (A11);
- ``/error-internal``: answers -32603 "Internal error" with ``data.details``, after a
  coloured ERROR line on stderr;
- ``/nothing``: ends ``end_turn`` with no update at all (as Claude Code answers the prompt after
  an authentication refusal);
- ``/hang``: one thought chunk and a stderr line, then never answers, ignores
  ``session/cancel`` and stays alive (an agent whose provider never answers; SIGTERM ends it).
- ``/silent``: never answers and never sends an update; ignores ``session/cancel`` (an agent
  stuck before its first event: A9's ``start_timeout``);
- ``/hang-after-update``: one message chunk, then nothing more; ignores ``session/cancel`` (a
  hung provider call mid-turn: A9's ``stall_timeout``);
- ``/permission-then-hang``: asks for permission as ``/permission`` does, replies with the
  answer, then sends nothing more and never answers (A9: the clock stands still while the
  approval is pending and runs again after).

``FAKE_ACP_STEER=1`` accepts ``_session/steering`` during a prompt (Q16).

Conversations (A8): ``FAKE_ACP_RESUME=resume`` advertises ``sessionCapabilities.resume`` (and
accepts ``session/resume``), ``load`` advertises ``loadSession`` (and accepts ``session/load``,
which replays the history: each earlier prompt as a user message chunk, then an agent message
``replayed history ``), ``none`` (the default) neither; ``FAKE_ACP_LOAD=1`` is ``load``.
``FAKE_ACP_CLOSE=1`` advertises ``sessionCapabilities.close`` (and accepts ``session/close``).
``FAKE_ACP_STORE=<dir>`` keeps each agent session on disk (``<dir>/<session id>.json``: its
prompts, and ``closed`` once ``session/close`` closed it), so that a restarted agent resumes or
loads a session an earlier process created; a session not found there is refused (-32002).
Without it any session id is accepted and starts with no prompts. ``FAKE_ACP_EXCLUSIVE=1``
(with a store) refuses to resume or load a session another live agent process holds (-32003
"Session is active"), as fast-agent does. ``/count`` replies
``count=<n>``: the prompts this agent session has seen, this one included (a continued
conversation counts on).
``FAKE_ACP_START_DELAY`` (seconds) delays the ``initialize`` answer; ``FAKE_ACP_FAIL_START=1``
makes ``session/new`` fail.

``FAKE_ACP_AUTH=1`` behaves like codex-acp (A11): ``initialize`` lists two ``authMethods`` (an
agent-handled ``fake-login`` and an ``env_var`` method ``fake-api-key`` needing
``FAKE_API_KEY``), writes an unrelated WARNING to stderr, and refuses ``session/new`` with -32000
unless ``authenticate`` was called with ``fake-api-key`` while ``FAKE_API_KEY`` is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AuthEnvVar,
    AuthMethodAgent,
    AvailableCommand,
    AvailableCommandsUpdate,
    CloseSessionResponse,
    EnvVarAuthMethod,
    PermissionOption,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionResumeCapabilities,
    ToolCallLocation,
    ToolCallUpdate,
)

_LOAD_ENV = "load" if os.environ.get("FAKE_ACP_LOAD") == "1" else "none"
RESUME = os.environ.get("FAKE_ACP_RESUME", _LOAD_ENV)
LOAD = RESUME == "load"
CLOSE = os.environ.get("FAKE_ACP_CLOSE") == "1"
STORE = Path(os.environ["FAKE_ACP_STORE"]) if os.environ.get("FAKE_ACP_STORE") else None
EXCLUSIVE = os.environ.get("FAKE_ACP_EXCLUSIVE") == "1"
AUTH = os.environ.get("FAKE_ACP_AUTH") == "1"
AUTH_METHODS: list[Any] = [
    AuthMethodAgent(id="fake-login", name="Log in", description="Run `fake login` in a terminal"),
    EnvVarAuthMethod(
        type="env_var",
        id="fake-api-key",
        name="Use FAKE_API_KEY",
        description="Requires setting the `FAKE_API_KEY` environment variable.",
        vars=[AuthEnvVar(name="FAKE_API_KEY")],
    ),
]


class FakeAgent:
    def __init__(self) -> None:
        self.client: Client | None = None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.prompting: set[str] = set()  # sessions whose prompt is under way (steering)
        self.loaded = False
        self.sessions: set[str] = set()
        self.prompts: dict[str, list[str]] = {}  # each session's prompts, oldest first (A8)
        self.authenticated: str | None = None

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        await asyncio.sleep(float(os.environ.get("FAKE_ACP_START_DELAY", "0")))
        if AUTH:  # codex-acp logs this whatever happens next
            print("WARNING: proceeding, even though we could not update PATH", file=sys.stderr)
            sys.stderr.flush()
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=LOAD,
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities() if RESUME == "resume" else None,
                    close=SessionCloseCapabilities() if CLOSE else None,
                ),
            ),
            auth_methods=AUTH_METHODS if AUTH else [],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        if method_id == "fake-api-key" and os.environ.get("FAKE_API_KEY"):
            self.authenticated = method_id
            return
        if method_id == "fake-api-key":
            raise RequestError.auth_required({"message": "FAKE_API_KEY is not set"})
        raise RequestError.invalid_params({"methodId": method_id})

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if os.environ.get("FAKE_ACP_FAIL_START") == "1":
            print("fake agent: no credentials", file=sys.stderr, flush=True)
            raise RequestError.internal_error({"details": "no credentials"})
        if AUTH and self.authenticated is None:
            raise RequestError.auth_required()
        session_id = f"fake-{uuid.uuid4().hex[:8]}"
        self.sessions.add(session_id)
        self.prompts[session_id] = []
        self._save(session_id)
        self._hold(session_id)
        return NewSessionResponse(session_id=session_id)

    def _save(self, session_id: str, *, closed: bool = False) -> None:
        if STORE is not None:
            STORE.mkdir(parents=True, exist_ok=True)
            record = {"prompts": self.prompts.get(session_id, []), "closed": closed}
            # Replaced in one step: a test reading it never sees a half-written file.
            temporary = STORE / f".{session_id}.{os.getpid()}.tmp"
            temporary.write_text(json.dumps(record), encoding="utf-8")
            temporary.replace(STORE / f"{session_id}.json")

    def _hold(self, session_id: str) -> None:
        """``FAKE_ACP_EXCLUSIVE``: this process holds the session (refused when another live
        process does)."""
        if STORE is None or not EXCLUSIVE:
            return
        owner = STORE / f"{session_id}.owner"
        if owner.exists():
            pid = int(owner.read_text(encoding="utf-8"))
            if pid != os.getpid() and _alive(pid):
                raise RequestError(-32003, f"Session is active: {session_id} (pid {pid})")
        temporary = STORE / f".{session_id}.{os.getpid()}.owner"
        temporary.write_text(str(os.getpid()), encoding="utf-8")
        temporary.replace(owner)

    def _continue(self, session_id: str) -> None:
        """Take up a session an earlier process created (from the store, when there is one)."""
        if STORE is not None:
            path = STORE / f"{session_id}.json"
            if not path.exists():
                raise RequestError.resource_not_found(f"session {session_id}")
            self._hold(session_id)
            self.prompts[session_id] = json.loads(path.read_text(encoding="utf-8"))["prompts"]
        self.prompts.setdefault(session_id, [])
        self.sessions.add(session_id)

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        if RESUME != "resume":
            raise RequestError.method_not_found("session/resume")
        self._continue(session_id)
        return ResumeSessionResponse()

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        if not LOAD:
            raise RequestError.method_not_found("session/load")
        self._continue(session_id)
        self.loaded = True
        # History replayed on load must not reach a turn.
        assert self.client is not None
        for text in self.prompts[session_id]:
            await self.client.session_update(session_id, update_user_message_text(text))
        await self._say(session_id, "replayed history ")
        return LoadSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        if not CLOSE:
            raise RequestError.method_not_found("session/close")
        self._save(session_id, closed=True)
        self.sessions.discard(session_id)
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """``_session/steering`` (Claude Code's and Codex's adapters): with FAKE_ACP_STEER=1 a
        message offered during a prompt is taken (``injected``) and acknowledged in the turn;
        outside a prompt it is ``failed``. Without it the method does not exist."""
        if method != "session/steering" or os.environ.get("FAKE_ACP_STEER") != "1":
            raise RequestError.method_not_found(f"_{method}")
        session_id = str(params.get("sessionId"))
        if session_id not in self.prompting:
            return {"outcome": "failed"}
        text = " ".join(str(p.get("text", "")) for p in params.get("prompt", []))
        await self._say(session_id, f"steered: {text} ")
        return {"outcome": "injected"}

    async def _say(self, session_id: str, text: str) -> None:
        assert self.client is not None
        await self.client.session_update(session_id, update_agent_message_text(text))

    async def _ask(self, session_id: str) -> str | None:
        assert self.client is not None
        answer = await self.client.request_permission(
            session_id,
            ToolCallUpdate(tool_call_id="call-perm", title="Write notes.txt"),
            [
                PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        return getattr(outcome, "option_id", None)

    async def _relay_fifo(self, session_id: str, path: str, cancel: asyncio.Event) -> str:
        """``/fifo``: relay the test's lines until ``null`` (``end_turn``) or a cancel."""
        # O_RDWR: opening never waits for a writer and the pipe never reads as closed.
        pipe = os.fdopen(os.open(path, os.O_RDWR | os.O_NONBLOCK), "rb", buffering=0)
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            while True:
                line = asyncio.ensure_future(reader.readline())
                await asyncio.wait({line, cancelled}, return_when=asyncio.FIRST_COMPLETED)
                if cancelled.done():
                    line.cancel()
                    return "cancelled"
                value = json.loads(line.result())
                if value is None:
                    return "end_turn"
                await self._fifo_update(session_id, value)
        finally:
            cancelled.cancel()
            transport.close()

    async def _fifo_update(self, session_id: str, value: Any) -> None:
        assert self.client is not None
        if isinstance(value, str) and value == "/permission":
            option = await self._ask(session_id)
            await self._say(session_id, f"permission: {option or 'cancelled'}")
        elif isinstance(value, str):
            await self._say(session_id, value)
        elif "tool" in value:  # {"tool": id, "title": …, "status": …}: start, then updates
            call_id, status = value["tool"], value.get("status", "pending")
            if "title" in value:
                update: Any = start_tool_call(call_id, value["title"], status=status)
            else:
                update = update_tool_call(call_id, status=status)
            await self.client.session_update(session_id, update)
        elif "plan" in value:  # {"plan": [[content, status], …]}
            entries = [plan_entry(c, status=s) for c, s in value["plan"]]
            await self.client.session_update(session_id, update_plan(entries))
        elif "thought" in value:
            await self.client.session_update(
                session_id, update_agent_thought_text(value["thought"])
            )

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        self.prompting.add(session_id)
        try:
            return await self._prompt(prompt, session_id)
        finally:
            self.prompting.discard(session_id)

    async def _prompt(self, prompt: list[Any], session_id: str) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        word = text.split(maxsplit=1)[0] if text.strip() else ""
        cancel = self.cancelled[session_id] = asyncio.Event()
        client = self.client
        assert client is not None
        end = "end_turn"
        self.prompts.setdefault(session_id, []).append(text)
        self._save(session_id)
        if word == "/count":
            await self._say(session_id, f"count={len(self.prompts[session_id])}")
        elif word == "/whoami":
            await self._say(
                session_id,
                f"pid={os.getpid()} session={session_id} loaded={int(self.loaded)} "
                f"auth={self.authenticated or '-'} cwd={os.getcwd()}",
            )
        elif word == "/helper":
            # Like an agent's MCP server: a child in the agent's process group that outlives
            # the agent when the agent alone dies (it never reads the agent's stdin).
            helper = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                [sys.executable, "-c", "import time; time.sleep(3600)"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
            await self._say(session_id, f"helper={helper.pid}")
        elif word == "/tool":
            await client.session_update(
                session_id, start_tool_call("call-1", "Read file", kind="read", status="pending")
            )
            await client.session_update(
                session_id, update_tool_call("call-1", status="in_progress")
            )
            await client.session_update(
                session_id,
                update_tool_call(
                    "call-1",
                    status="completed",
                    content=[tool_content(text_block("file contents"))],
                    locations=[ToolCallLocation(path="/tmp/notes.txt", line=3)],
                ),
            )
            await self._say(session_id, "read it")
        elif word == "/plan":
            entries = [plan_entry("look", priority="high"), plan_entry("fix")]
            await client.session_update(session_id, update_plan(entries))
            entries[0] = plan_entry("look", priority="high", status="completed")
            await client.session_update(session_id, update_plan(entries))
            await self._say(session_id, "planned")
        elif word == "/thought":
            await client.session_update(session_id, update_agent_thought_text("thinking"))
            await self._say(session_id, "thought")
        elif word == "/raw":
            update = AvailableCommandsUpdate(
                session_update="available_commands_update",
                available_commands=[AvailableCommand(name="web", description="search")],
            )
            await client.session_update(session_id, update)
            await self._say(session_id, "raw sent")
        elif word == "/permission":
            option = await self._ask(session_id)
            await self._say(session_id, f"permission: {option or 'cancelled'}")
            if option is None:
                end = "cancelled"
        elif word in ("/refusal", "/max_tokens", "/max_turn_requests"):
            await self._say(session_id, "no")
            end = word[1:]
        elif word == "/slow":
            for i in range(1200):
                if cancel.is_set():
                    return PromptResponse(stop_reason="cancelled")
                await self._say(session_id, f"{i} ")
                await asyncio.sleep(0.05)
        elif word == "/fifo":
            end = await self._relay_fifo(session_id, text.split(maxsplit=1)[1].strip(), cancel)
        elif word == "/steps":
            args = text.split()[1:]
            count = int(args[0]) if args else 5
            pause = float(args[1]) if len(args) > 1 else 0.04
            for i in range(count):
                if cancel.is_set():
                    return PromptResponse(stop_reason="cancelled")
                entries = [
                    plan_entry(f"step {j}", status="completed" if j < i else "pending")
                    if j != i
                    else plan_entry(f"step {j}", status="in_progress")
                    for j in range(count)
                ]
                await client.session_update(session_id, update_plan(entries))
                call = f"step-{i}"
                await client.session_update(
                    session_id, start_tool_call(call, f"Step {i}", kind="execute", status="pending")
                )
                await asyncio.sleep(pause)
                await client.session_update(session_id, update_tool_call(call, status="completed"))
                await self._say(session_id, f"step {i} ")
            done = [plan_entry(f"step {j}", status="completed") for j in range(count)]
            await client.session_update(session_id, update_plan(done))
        elif word in ("/deaf", "/stubborn"):
            if word == "/stubborn":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            await self._say(session_id, "not listening")
            await asyncio.sleep(3600)
        elif word == "/crash":
            await self._say(session_id, "about to crash")
            print("fake agent: fatal error in the middle of a turn", file=sys.stderr, flush=True)
            os._exit(3)
        elif word == "/crash-permission":
            asking = asyncio.ensure_future(self._ask(session_id))
            await asyncio.sleep(0.2)
            print("fake agent: died while asking", file=sys.stderr, flush=True)
            os._exit(4)
            await asking  # pragma: no cover
        elif word == "/stderr":
            line = b"x" * 1023 + b"\n"
            for _ in range(5 * 1024):
                sys.stderr.buffer.write(line)
            sys.stderr.buffer.write(b"stderr done\n")
            sys.stderr.flush()
            await self._say(session_id, "wrote 5 MB of stderr")
        elif word == "/bigline":
            await self._say(session_id, "y" * (64 * 1024))
        elif word == "/error-auth":
            print(
                "Error handling request { method: 'session/prompt' } "
                "{ code: -32000, message: 'Authentication required' }",
                file=sys.stderr,
                flush=True,
            )
            raise RequestError.auth_required()
        elif word == "/error-internal":
            # coloured, as codex logs
            print("\x1b[31mERROR\x1b[0m the model returned nothing", file=sys.stderr, flush=True)
            raise RequestError.internal_error({"details": "the model returned nothing"})
        elif word == "/nothing":
            pass
        elif word == "/hang":
            print("fake agent: waiting for the model provider", file=sys.stderr, flush=True)
            await client.session_update(session_id, update_agent_thought_text("calling the model"))
            await asyncio.Event().wait()  # no answer, no more updates; session/cancel is ignored
        elif word == "/silent":
            await asyncio.Event().wait()  # nothing at all, ever
        elif word == "/hang-after-update":
            await self._say(session_id, "working on it")
            await asyncio.Event().wait()
        elif word == "/permission-then-hang":
            option = await self._ask(session_id)
            await self._say(session_id, f"permission: {option or 'cancelled'}")
            await asyncio.Event().wait()
        elif word == "/exit":
            await self._say(session_id, f"bye pid={os.getpid()}")
            asyncio.get_running_loop().call_later(0.05, os._exit, 0)
        else:
            await self._say(session_id, "echo: ")
            await self._say(session_id, text)
        return PromptResponse(stop_reason=end)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    """The process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


async def main() -> None:
    # The package routes session/resume and session/close only as "unstable" methods.
    await run_agent(FakeAgent(), use_unstable_protocol=True)  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main())
