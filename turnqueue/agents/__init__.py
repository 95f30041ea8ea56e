"""Agents: what runs a turn (SPEC §2). The engine sees only :class:`Agent` and :class:`AgentRun`.

``build_agent(name, settings)`` makes the profile a session names (``CreateTaskInput.agent``,
default ``TURNQUEUE_AGENT``): ``scripted`` (:mod:`.scripted`) or ``command`` (:mod:`.command`).
"""

from __future__ import annotations

from turnqueue.agents.base import (
    Agent,
    AgentResult,
    AgentRun,
    AgentStartError,
    BaseRun,
    Signal,
)
from turnqueue.agents.command import CommandAgent
from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.errors import InvalidInput
from turnqueue.settings import Settings

AGENT_NAMES = ("scripted", "command")

__all__ = [
    "AGENT_NAMES",
    "Agent",
    "AgentResult",
    "AgentRun",
    "AgentStartError",
    "BaseRun",
    "CommandAgent",
    "ScriptedAgent",
    "Signal",
    "build_agent",
]


def build_agent(name: str, settings: Settings) -> Agent:
    """The agent for profile ``name``; ``InvalidInput`` for a name not in :data:`AGENT_NAMES`."""
    if name == "scripted":
        return ScriptedAgent(settings.scripted_turn_seconds)
    if name == "command":
        # An empty or unusable command is reported per turn by ``start`` (the turn fails).
        return CommandAgent(settings.agent_command)
    known = ", ".join(AGENT_NAMES)
    raise InvalidInput(f"unknown agent {name!r}; known agents: {known}", field=["agent"])
