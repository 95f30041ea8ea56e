"""What an ACP agent's failures mean, in words a person can act on (SPEC A11).

- an **error answer** to a request: the agent is alive and says why it will not work. Its code
  and message are kept, classified (:func:`classify`) from the code and the words real agents use
  (``tests/agents/test_acp_errors.py`` quotes them);
- an **exit** (:func:`describe_exit`): its real status; a signal turnqueue sent is named as
  turnqueue's, never as the agent's;
- an **authentication refusal**: the agent's methods are listed (:func:`methods_hint`), so a
  person knows what to configure.

A start that failed (:func:`start_error`) is one of these, its timeout, or what kept the command
from starting. The agent's stderr is never part of these messages: it is kept apart.
"""

from __future__ import annotations

import re
import signal as posix_signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp import RequestError
from acp.schema import AuthMethodAgent, EnvVarAuthMethod, TerminalAuthMethod

from turnqueue.agents.acp_process import AcpProcess
from turnqueue.agents.base import AgentStartError
from turnqueue.domain import AgentErrorKind, AuthMethod

#: ACP's "authentication required" code (``RequestError.auth_required``).
AUTH_REQUIRED = -32000
#: The longest agent message kept in a reason (an agent may put a whole stack in it).
MESSAGE_LIMIT = 2_000

_AUTH = re.compile(
    r"auth|api[ _-]?key|unauthori[sz]ed|\b401\b|\b403\b|credential|log ?in\b|not logged|"
    r"invalid[ _-]x-api-key|permission denied|forbidden",
    re.IGNORECASE,
)
_RATE = re.compile(
    r"rate[ _-]?limit|\b429\b|quota|too many requests|resource[ _]exhausted|overloaded|"
    r"usage limit",
    re.IGNORECASE,
)
_UNREACHABLE = re.compile(
    r"cannot connect|can't connect|unable to connect|connection (refused|reset|error)|"
    r"econnrefused|econnreset|enotfound|eai_again|etimedout|getaddrinfo|"
    r"name or service not known|failed to lookup address|temporary failure in name resolution|"
    r"network|fetch failed|error sending request|stream disconnected|socket hang up|"
    r"timed out|timeout|unreachable|\b50[234]\b|service unavailable|bad gateway",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class AgentFailure:
    """An agent's error answer, ready to be shown: ``text`` is what a turn's ``error`` says."""

    kind: AgentErrorKind
    code: int
    message: str

    @property
    def text(self) -> str:
        label = self.kind.value.lower().replace("_", " ")
        return f"agent error {self.code} ({label}): {self.message}"

    @property
    def sentence(self) -> str:  # :attr:`text` as a sentence, for a hint to follow
        text = self.text
        return text if text.endswith((".", "!", "?")) else text + "."


def message_of(error: RequestError) -> str:
    """The agent's message, with the detail its ``data`` carries (``message`` / ``details``)
    when the message alone is generic (codex: "Internal error" + data.message)."""
    message = str(error).strip() or "(no message)"
    data: Any = error.data
    detail: Any = None
    if isinstance(data, str):
        detail = data
    elif isinstance(data, Mapping):
        detail = data.get("message") or data.get("details") or data.get("error")
    if isinstance(detail, str) and detail.strip() and detail.strip() not in message:
        message = f"{message}: {detail.strip()}"
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    return message


def classify(code: int, message: str) -> AgentErrorKind:
    """A11: what an error answer means, from its code and message. The words decide first
    (an agent may use any code); ACP's -32000 alone means authentication."""
    if _RATE.search(message):
        return AgentErrorKind.RATE_LIMIT
    if _UNREACHABLE.search(message):
        return AgentErrorKind.PROVIDER_UNREACHABLE
    if _AUTH.search(message) or code == AUTH_REQUIRED:
        return AgentErrorKind.AUTHENTICATION
    return AgentErrorKind.INTERNAL


def failure_of(error: RequestError) -> AgentFailure:
    message = message_of(error)
    return AgentFailure(classify(error.code, message), error.code, message)


def describe_exit(returncode: int | None, sent: Iterable[posix_signal.Signals] = ()) -> str:
    """A4/A11: how the process ended (``None``: it closed its pipes and still ran); ``sent``:
    the signals turnqueue sent it."""
    if returncode is None:
        return "agent closed its connection while its process was still running"
    if returncode >= 0:
        return f"agent process exited (status {returncode})"
    number = -returncode
    try:
        name = posix_signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    if number in {int(s) for s in sent}:
        return f"agent process ended by turnqueue's {name}"
    return f"agent process killed by {name} (not sent by turnqueue)"


async def start_error(
    process: AcpProcess | None, exc: Exception, start_timeout: float
) -> AgentStartError:
    """A2/A11: why a start failed, in the agent's words where it gave any, its stderr apart.
    Called before turnqueue kills the process, so an exit status is its own."""
    if isinstance(exc, AgentStartError):
        reason, kind = str(exc), exc.kind
        if process is not None:  # a refusal: what it logged with it, too
            await process.stderr_quiet()
    elif isinstance(exc, TimeoutError):
        reason = f"agent did not start within {start_timeout:g} s"
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


def auth_methods(methods: Sequence[Any] | None) -> tuple[AuthMethod, ...]:
    """The ``authMethods`` of an ``initialize`` answer, as the domain keeps them."""
    found: list[AuthMethod] = []
    for method in methods or ():
        if not isinstance(method, EnvVarAuthMethod | TerminalAuthMethod | AuthMethodAgent):
            continue
        env = (
            tuple(v.name for v in method.vars if not v.optional)
            if isinstance(method, EnvVarAuthMethod)
            else ()
        )
        found.append(AuthMethod(method.id, method.name, method.description, env))
    return tuple(found)


def usable_method(
    methods: Sequence[AuthMethod], env: Mapping[str, str], named: str | None
) -> str | None:
    """A11: the method to ``authenticate`` with: the profile's ``auth_method`` when it names
    one, else the first ``env_var`` method whose variables the profile's ``env`` all sets."""
    if named is not None:
        return named
    for method in methods:
        if method.env_vars and all(env.get(name) for name in method.env_vars):
            return method.id
    return None


def methods_hint(methods: Sequence[AuthMethod]) -> str:
    """What a person can configure, from the agent's own list of methods."""
    if not methods:
        return (
            "The agent lists no authentication methods: give it its credentials through the "
            "profile's env (see docs/agents.md)."
        )
    parts = []
    for method in methods:
        part = f"{method.id} ({method.name}"
        if method.description:
            part += f": {method.description}"
        if method.env_vars:
            part += f"; set {', '.join(method.env_vars)} in the profile's env"
        parts.append(part + ")")
    return (
        "The agent's authentication methods: "
        + "; ".join(parts)
        + ". Set a method's variables in the profile's env, or name a method with auth_method."
    )
