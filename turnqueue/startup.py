"""What ``turnqueue serve`` tells its user once it listens (M1): one log record.

::

    turnqueue is ready on http://127.0.0.1:8000 (Ctrl-C stops it)
      web page  http://127.0.0.1:8000/
      GraphiQL  http://127.0.0.1:8000/graphql
      store     SQLite /home/me/turnqueue/turnqueue.db
      agents    scripted (the default); command: set TURNQUEUE_AGENT_COMMAND to run one per turn
      access    no token: one local user, this machine only

It is logged after the socket is bound (:class:`AnnouncingServer`), so it never announces a
server that then fails to bind. A front end that is not built says how to get it. No secret is
ever printed: the store is shown without its password, tokens by how many principals have one.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn

from turnqueue.api import graphiql, webui
from turnqueue.domain import AgentProfile
from turnqueue.settings import Settings

log = logging.getLogger("turnqueue")

#: Hosts that listen on every interface: the banner shows a loopback URL that reaches them.
ANY_HOST = frozenset({"0.0.0.0", "::", ""})


def describe_store(url: str) -> str:
    """``SQLite <absolute path>`` or ``PostgreSQL user@host:port/database`` (no password)."""
    scheme, _, rest = url.partition("://")
    if scheme.startswith("sqlite"):
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///x is x; sqlite:////x is /x
        if path in ("", ":memory:"):
            return "SQLite in memory"
        return f"SQLite {Path(path.split('?', 1)[0]).resolve()}"
    if scheme.startswith("postgres"):
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        host = parts.hostname or "the local socket"
        port = f":{parts.port}" if parts.port else ""
        return f"PostgreSQL {user}{host}{port}{parts.path}"
    return scheme  # never the rest: it may hold a password


def describe_access(settings: Settings) -> str:
    """How requests authenticate (S1, S5), without any secret."""
    ways = []
    if settings.tokens:
        count = len(settings.tokens)
        ways.append(f"bearer tokens ({count} principal{'s' if count != 1 else ''})")
    if settings.jwt_secret:
        ways.append("JWTs signed with TURNQUEUE_JWT_SECRET (HS256)")
    if settings.jwt_jwks_file is not None:
        ways.append(f"JWTs signed by the keys in {settings.jwt_jwks_file}")
    if not ways:
        return "no token: one local user, this machine only"
    return " or ".join(ways) + " (Authorization: Bearer …)"


def describe_agents(agents: Sequence[AgentProfile], default: str) -> str:
    names = [
        f"{a.name} (the default)" if a.name == default else f"{a.name} ({a.type.lower()})"
        for a in sorted(agents, key=lambda a: (a.name != default, a.name))
    ]
    text = ", ".join(names)
    if not any(a.name == "command" for a in agents):
        text += "; command: set TURNQUEUE_AGENT_COMMAND to run one per turn"
    return text


def base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ANY_HOST else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def banner(settings: Settings, port: int, agents: Sequence[AgentProfile], default: str) -> str:
    url = base_url(settings.host, port)
    where = f" (listening on all interfaces, {settings.host})" if settings.host in ANY_HOST else ""
    if (webui.default_dist() / "index.html").is_file():
        page = f"{url}/"
    else:
        page = (
            "not built: ./tq serve builds it when Node.js 20.19+ and npm are installed "
            "(or: npm ci && npm run build, in frontend_examples/web)"
        )
    graphiql_url = f"{url}/graphql"
    if not graphiql.graphiql_routes():
        graphiql_url += (
            " (not built: Strawberry's page, from a CDN, needs internet access; ./tq serve "
            "builds the offline one when Node.js 20.19+ and npm are installed)"
        )
    lines = [
        f"turnqueue is ready on {url}{where} (Ctrl-C stops it)",
        f"  web page  {page}",
        f"  GraphiQL  {graphiql_url}",
        f"  store     {describe_store(settings.database_url)}",
        f"  agents    {describe_agents(agents, default)}",
        f"  access    {describe_access(settings)}",
    ]
    return "\n".join(lines)


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, logging :func:`banner` once it listens."""

    def __init__(
        self,
        config: uvicorn.Config,
        settings: Settings,
        agents: Sequence[AgentProfile],
        default: str,
    ) -> None:
        super().__init__(config)
        self._settings = settings
        self._agents = agents
        self._default = default

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else 0
            text = banner(self._settings, port, self._agents, self._default)
            log.info(text, extra={"url": base_url(self._settings.host, port)})
