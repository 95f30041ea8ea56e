"""Agent profiles from ``TURNQUEUE_AGENTS_FILE`` (SPEC A1; the format: docs/agents.md).

A TOML file: ``default = "<profile>"`` optionally, and one ``[agents.<name>]`` table per profile
(the fields of :class:`_Table`). ``${VAR}`` in an ``env`` value is the server's ``VAR`` (empty,
with a warning, when unset); an ``acp`` agent gets that ``env`` on top of a minimal environment,
never the server's whole one. The built-in ``scripted`` and ``command`` profiles exist unless
the file defines profiles of those names. Anything wrong with the file is a
:class:`ProfileError` naming the file and the fault; the server refuses to start.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnqueue.agents.base import DEFAULT_STALL_TIMEOUT, Bounds
from turnqueue.domain import AgentType

log = logging.getLogger(__name__)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_IDLE_TIMEOUT = 600.0
DEFAULT_START_TIMEOUT = 60.0


class ProfileError(ValueError):
    """The agents file cannot be used; the message says why (A1)."""


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    type: AgentType
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    permissions: Literal["ask", "allow", "reject"] = "ask"
    workspace: Path | None = None
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    start_timeout: float = DEFAULT_START_TIMEOUT
    turn_seconds: float | None = None  # scripted: overrides TURNQUEUE_SCRIPTED_TURN_SECONDS
    auth_method: str | None = None  # acp: the authentication method to use (A11)
    stall_timeout: float | None = None  # A9 (None: TURNQUEUE_STALL_TIMEOUT)
    approval_timeout: float | None = None  # A10: seconds before a pending approval expires

    def bounds(self, default_stall: float = DEFAULT_STALL_TIMEOUT) -> Bounds:
        """A9: ``stall_timeout`` (or ``default_stall``) between two signs of life. The first
        after an ``acp`` prompt within ``start_timeout``; a command or scripted turn, whose
        process start is no handshake, has ``stall_timeout`` for its first too."""
        stall = self.stall_timeout if self.stall_timeout is not None else default_stall
        start = self.start_timeout if self.type is AgentType.ACP else stall
        return Bounds(start=start, stall=stall)


@dataclass(frozen=True, slots=True)
class Profiles:
    profiles: dict[str, Profile]
    default: str | None


class _Table(BaseModel):
    """One ``[agents.<name>]`` table. ``start_timeout`` bounds an ``acp`` agent's start (spawn,
    ``initialize``, ``session/new``) and a prompt's first activity (A9); ``auth_method`` is the
    agent's method to ``authenticate`` with (A11; by default the first ``env_var`` method whose
    variables ``env`` sets); ``approval_timeout`` answers a pending approval with its reject
    option (A10)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["acp", "command", "scripted"]
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    permissions: Literal["ask", "allow", "reject"] = "ask"
    workspace: Path | None = None
    idle_timeout: float = Field(default=DEFAULT_IDLE_TIMEOUT, gt=0)
    start_timeout: float = Field(default=DEFAULT_START_TIMEOUT, gt=0)
    turn_seconds: float | None = Field(default=None, ge=0)
    auth_method: str | None = Field(default=None, min_length=1)
    stall_timeout: float | None = Field(default=None, gt=0)
    approval_timeout: float | None = Field(default=None, gt=0)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    agents: dict[str, _Table] = Field(default_factory=dict)


def expand(value: str, environ: dict[str, str] | None = None) -> str:
    """``${VAR}`` → the server's ``VAR``; an unset one becomes empty (logged)."""
    source = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            log.warning("agents file: ${%s} is not set in the server's environment", name)
        return source.get(name, "")

    return _VAR.sub(one, value)


def load_profiles(path: Path | None) -> Profiles:
    """Read and check the agents file (``None``: no file, no profiles)."""
    if path is None:
        return Profiles({}, None)
    where = f"agents file {path}"
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{where}: cannot be read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from exc
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ProfileError(f"{where}:\n" + "\n".join(lines)) from exc
    profiles: dict[str, Profile] = {}
    for name, table in parsed.agents.items():
        if not _NAME.match(name):
            raise ProfileError(f"{where}: profile name {name!r} must be 1-64 letters, digits, ._-")
        if table.type in ("acp", "command") and not table.command:
            raise ProfileError(f"{where}: agents.{name}: type {table.type!r} needs a command")
        if table.command is not None and any(not part for part in table.command):
            raise ProfileError(f"{where}: agents.{name}.command has an empty argument")
        for key in ("auth_method", "approval_timeout"):  # A11; A6, A10: only acp agents ask
            if getattr(table, key) is not None and table.type != "acp":
                raise ProfileError(f"{where}: agents.{name}.{key} is for acp profiles only")
        if table.workspace is not None and not table.workspace.is_absolute():
            raise ProfileError(f"{where}: agents.{name}.workspace must be an absolute path")
        profiles[name] = Profile(
            name=name,
            type=AgentType(table.type.upper()),
            command=tuple(table.command or ()),
            env={key: expand(value) for key, value in table.env.items()},
            **table.model_dump(exclude={"type", "command", "env"}),  # the other fields as given
        )
    known = {*profiles, "scripted", "command"}  # the built-in profiles too
    if parsed.default is not None and parsed.default not in known:
        names = ", ".join(sorted(known))
        raise ProfileError(f"{where}: default {parsed.default!r} is not a profile ({names})")
    return Profiles(profiles, parsed.default)
