"""The start-up banner's parts (issue 26): the store and access are shown without secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnqueue.domain import AgentProfile, AgentType
from turnqueue.settings import Settings
from turnqueue.startup import base_url, describe_access, describe_agents, describe_store


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:////srv/tq/turnqueue.db", "SQLite /srv/tq/turnqueue.db"),
        ("sqlite+aiosqlite:////srv/tq.db", "SQLite /srv/tq.db"),
        ("sqlite://", "SQLite in memory"),
        ("postgresql://tq:s3cret@db.example:5433/prod", "PostgreSQL tq@db.example:5433/prod"),
        ("postgres://tq:s3cret@db.example/prod", "PostgreSQL tq@db.example/prod"),
        ("postgresql+asyncpg://db.example/prod", "PostgreSQL db.example/prod"),
        ("mysql://root:s3cret@h/db", "mysql"),
    ],
)
def test_describe_store_never_shows_a_password(url: str, shown: str) -> None:
    assert describe_store(url) == shown


def test_describe_store_resolves_a_relative_sqlite_path() -> None:
    assert describe_store("sqlite:///./tq.db") == f"SQLite {Path.cwd() / 'tq.db'}"


def test_describe_access_counts_principals_never_tokens() -> None:
    text = describe_access(Settings(tokens={"alice": "tok-secret-a", "bob": "tok-secret-b"}))
    assert text == "bearer tokens (2 principals) (Authorization: Bearer …)"
    jwt = describe_access(Settings(jwt_secret="s" * 32))
    assert "TURNQUEUE_JWT_SECRET" in jwt and "s" * 32 not in jwt
    assert describe_access(Settings()) == "no token: one local user, this machine only"


def test_describe_agents_puts_the_default_first() -> None:
    agents = [AgentProfile("scripted", AgentType.SCRIPTED), AgentProfile("claude", AgentType.ACP)]
    assert describe_agents(agents, "claude") == (
        "claude (the default), scripted (scripted); "
        "command: set TURNQUEUE_AGENT_COMMAND to run one per turn"
    )
    with_command = [*agents, AgentProfile("command", AgentType.COMMAND)]
    assert describe_agents(with_command, "scripted") == (
        "scripted (the default), claude (acp), command (command)"
    )


def test_base_url_for_every_interface_and_ipv6() -> None:
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url("::1", 8000) == "http://[::1]:8000"
