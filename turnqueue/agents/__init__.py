"""Agents: what runs a turn (SPEC §2). The engine sees only :class:`Agent` and :class:`AgentRun`.

``build_agent(name, settings)`` makes the profile a session names (``CreateTaskInput.agent``,
default ``TURNQUEUE_AGENT``): ``scripted`` (:mod:`.scripted`) or ``command`` (:mod:`.command`).
``build_agents(settings)`` makes every profile that can run: ``scripted``, ``command`` when
``TURNQUEUE_AGENT_COMMAND`` is set, and the profiles of ``TURNQUEUE_AGENTS_FILE``
(:mod:`.profiles`; ``acp`` profiles are :mod:`.acp`). A profile that cannot run is neither listed
(``agents``) nor accepted (``createTask``: :func:`unknown_agent`), and a default that cannot run
stops the server at start.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection

from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.base import (
    Agent,
    AgentResult,
    AgentRun,
    AgentStartError,
    Bounds,
    Signal,
    Steerable,
    error_text,
)
from turnqueue.agents.command import CommandAgent
from turnqueue.agents.profiles import Profile, ProfileError, load_profiles
from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.domain import AgentProfile, AgentType
from turnqueue.errors import InvalidInput
from turnqueue.settings import Settings

AGENT_NAMES = ("scripted", "command")

__all__ = [
    "AGENT_NAMES",
    "AcpAgent",
    "Agent",
    "AgentResult",
    "AgentRun",
    "AgentStartError",
    "CommandAgent",
    "ProfileError",
    "ScriptedAgent",
    "Signal",
    "Steerable",
    "agent_profile",
    "build_agent",
    "build_agents",
    "error_text",
    "unknown_agent",
]


def build_agent(name: str, settings: Settings) -> Agent:
    """The agent for profile ``name``; ``InvalidInput`` for a name not in :data:`AGENT_NAMES`."""
    bounds = Bounds(settings.stall_timeout, settings.stall_timeout)  # A9 for the built-ins
    if name == "scripted":
        return ScriptedAgent(settings.scripted_turn_seconds, bounds=bounds)
    if name == "command":
        # An empty or unusable command is reported per turn by ``start`` (the turn fails).
        return CommandAgent(settings.agent_command, bounds=bounds)
    known = ", ".join(AGENT_NAMES)
    raise InvalidInput(f"unknown agent {name!r}; known agents: {known}", field=["agent"])


def _from_profile(profile: Profile, settings: Settings) -> Agent:
    agent: Agent
    bounds = profile.bounds(settings.stall_timeout)
    if profile.type is AgentType.ACP:
        return AcpAgent(profile, bounds=bounds)
    if profile.type is AgentType.COMMAND:
        agent = CommandAgent(shlex.join(profile.command), bounds=bounds)
    else:
        seconds = profile.turn_seconds
        agent = ScriptedAgent(
            settings.scripted_turn_seconds if seconds is None else seconds, bounds=bounds
        )
    agent.name = profile.name
    return agent


def build_agents(settings: Settings) -> tuple[dict[str, Agent], str]:
    """Every profile that can run (A1) and the default profile's name. Raises
    :class:`ProfileError` for a bad ``TURNQUEUE_AGENTS_FILE`` or a default that cannot run: the
    server must not start with either."""
    loaded = load_profiles(settings.agents_file)
    agents: dict[str, Agent] = {"scripted": build_agent("scripted", settings)}
    if settings.agent_command.strip():
        agents["command"] = build_agent("command", settings)
    for name, profile in loaded.profiles.items():
        agents[name] = _from_profile(profile, settings)
    default = loaded.default or settings.agent
    if default not in agents:
        raise ProfileError(
            f"the default agent cannot run: {unknown_agent(default, agents).message}"
        )
    return agents, default


def unknown_agent(name: str, agents: Collection[str]) -> InvalidInput:
    """The refusal of a profile that is not among ``agents`` (those that can run), saying why."""
    known = ", ".join(sorted(agents))
    if name == "command":
        return InvalidInput(
            "agent 'command' is off: the server has no TURNQUEUE_AGENT_COMMAND (the command it "
            f"would run for each turn); agents are {known}",
            field=["agent"],
        )
    return InvalidInput(f"unknown agent {name!r}; agents are {known}", field=["agent"])


def agent_profile(name: str, agent: Agent) -> AgentProfile:
    """What clients see of a profile (A1): its name and type, never its command or env; for an
    ``acp`` profile, what its agent last said about authentication (A11); whether a STEER send
    may be taken (Q16): the scripted agent always, a command never, an ``acp`` agent until it
    answered that it has no ``_session/steering`` method (:attr:`AcpAgent.steering`)."""
    if isinstance(agent, AcpAgent):
        return AgentProfile(name, AgentType.ACP, agent.auth, steering=agent.steering)
    kind = AgentType.COMMAND if isinstance(agent, CommandAgent) else AgentType.SCRIPTED
    return AgentProfile(name, kind, None, steering=isinstance(agent, ScriptedAgent))
