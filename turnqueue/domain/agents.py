"""Agents as the engine and clients see them: profiles and what runs them (A1), authentication
(A11), the agent's own conversation behind a session (A8), and how an agent's failure is
classified (A11)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from turnqueue.domain.values import value


class AgentType(StrEnum):
    """What runs a profile's turns (A1)."""

    ACP = "ACP"
    COMMAND = "COMMAND"
    SCRIPTED = "SCRIPTED"


class AgentErrorKind(StrEnum):
    """How an agent's failure is classified (A11), from its error answer's code and message."""

    AUTHENTICATION = "AUTHENTICATION"  # no or wrong credentials
    RATE_LIMIT = "RATE_LIMIT"  # the provider's rate limit or quota
    PROVIDER_UNREACHABLE = "PROVIDER_UNREACHABLE"  # the model provider could not be reached
    INTERNAL = "INTERNAL"  # any other error answer
    AGENT_EXITED = "AGENT_EXITED"  # the process died or closed its pipes (no answer at all)
    STALLED = "STALLED"  # A9: no agent activity within its profile's bound; its agent killed


class AuthState(StrEnum):
    """What a profile's agent last said about authentication (A11), on this instance."""

    UNKNOWN = "UNKNOWN"  # not started yet
    NOT_ASKED = "NOT_ASKED"  # it started without an ``authenticate`` call
    AUTHENTICATED = "AUTHENTICATED"  # ``authenticate`` with a method of its succeeded
    REFUSED = "REFUSED"  # it refused for want of authentication


@value
class AuthMethod:
    """One authentication method an agent lists in ``initialize`` (ACP ``authMethods``)."""

    id: str
    name: str
    description: str | None = None
    env_vars: tuple[str, ...] = ()  # an ``env_var`` method: the variables it needs


@value
class AgentAuth:
    state: AuthState = AuthState.UNKNOWN
    method: str | None = None  # the method ``authenticate`` used
    methods: tuple[AuthMethod, ...] = ()  # what the agent lists
    message: str | None = None  # the agent's own refusal (REFUSED)


class ConversationStart(StrEnum):
    """How a session's agent conversation was opened the last time its agent started (A8)."""

    NEW = "NEW"  # ``session/new``: the agent starts from nothing
    RESUMED = "RESUMED"  # ``session/resume``: the agent's own session continues
    LOADED = "LOADED"  # ``session/load``: the agent replayed its history (kept out of turns)


@value
class AgentConversation:
    """A8: the agent's own session behind a turnqueue session, and what the agent advertised,
    kept from the moment ``session/new`` (or a resume or load) answers."""

    session_id: str
    profile: str
    agent_session_id: str
    can_resume: bool
    can_load: bool
    can_close: bool
    resumed: ConversationStart
    resume_error: str | None  # why a resume or load failed (then ``resumed`` is NEW)
    updated_at: datetime


@value
class AgentProfile:
    """A profile as clients see it (A1): never its command or environment."""

    name: str
    type: AgentType
    auth: AgentAuth | None = None  # acp profiles only (A11)
    steering: bool = False  # Q16: a STEER send may be taken by the running turn
