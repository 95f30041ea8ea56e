"""Helpers for the operations tests: real servers (in-process uvicorn, or ``python -m turnqueue
serve`` subprocesses that can be SIGKILLed/SIGTERMed and restarted on the same port), GraphQL
calls over httpx, and a parsed ``/metrics`` page.

Only loopback; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from clients import PORT_TRIES, START_WAIT, TLS, WAIT, free_port, listens, port_taken
from clients import Client as BaseClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from turnqueue.agents import Agent
from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.app import create_app
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.timeouts import within

REPO = Path(__file__).resolve().parents[2]


class Metrics:
    """A parsed Prometheus text page: ``m.value("turnqueue_turns_ended_total", status="X")``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in self.families.values():
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str) -> float:
        return sum(v for (n, _), v in self.samples.items() if n == name)


class Client(BaseClient):
    async def metrics(self) -> Metrics:
        response = await self.http.get(f"{self.base}/metrics")
        assert response.status_code == 200, response.text
        return Metrics(response.text)


# -- in-process ------------------------------------------------------------------------------------
@dataclass
class InProc:
    client: Client
    app: Starlette
    settings: Settings

    @property
    def engine(self) -> Engine:
        engine: Engine = self.app.state.engine
        return engine


@contextlib.asynccontextmanager
async def inproc_server(database_url: str, **overrides: Any) -> AsyncIterator[InProc]:
    """A real uvicorn server in this process; agents ``scripted`` (0.2 s) and ``slow`` (30 s)."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "scripted_turn_seconds": 0.2,
        "cancel_timeout": 1.0,
        "escalation_timeout": 0.5,
        "lease_seconds": 2.0,
    }
    values.update(overrides)
    settings = Settings(**values)
    agents: dict[str, Agent] = {
        "scripted": ScriptedAgent(settings.scripted_turn_seconds),
        "slow": ScriptedAgent(30.0),
    }
    app = create_app(settings, agents=agents)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, ws="auto", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(int(WAIT / 0.01)):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    assert server.started, "in-process server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    token = next(iter(settings.tokens.values()), None)
    client = Client(f"http://127.0.0.1:{port}", token)
    try:
        yield InProc(client, app, settings)
    finally:
        await client.aclose()
        server.should_exit = True
        await within(task, 30)


# -- subprocess ------------------------------------------------------------------------------------
class ProcServer:
    """One ``python -m turnqueue serve`` process; ``start`` again after ``kill``/``term`` reuses
    the same port and database."""

    def __init__(self, database_url: str, log: Path, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "TURNQUEUE_DATABASE_URL": database_url,
            "TURNQUEUE_HOST": "127.0.0.1",
            "TURNQUEUE_PORT": str(self.port),
            "TURNQUEUE_TOKENS": "",
            "TURNQUEUE_LEASE_SECONDS": "1.0",
            "TURNQUEUE_SCRIPTED_TURN_SECONDS": "0.3",
            **env,
        }
        self.log_path = log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> ProcServer:
        """Start the process and wait until it listens on its port and is ready. On the first
        start a port taken between :func:`free_port` and the bind (by another test's server) is
        retried on a new one; a restart keeps its port (clients may hold the address)."""
        for attempt in range(PORT_TRIES):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                    [sys.executable, "-m", "turnqueue", "serve"],
                    env=self.env,
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if await self._ready():
                self.starts += 1
                return self
            retry = self.starts == 0 and attempt + 1 < PORT_TRIES
            if retry and port_taken(self.log_text()[offset:]):
                self._use_port(free_port())
                continue
            raise RuntimeError(f"server exited: {self.log_text()[-3000:]}")
        raise AssertionError("unreachable")

    def _use_port(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.env["TURNQUEUE_PORT"] = str(port)

    async def _ready(self) -> bool:
        """True once this process listens on its port and answers ``/readyz``; False if it
        exited."""
        assert self.process is not None
        async with httpx.AsyncClient(timeout=2, verify=TLS) as http:
            for _ in range(int(START_WAIT / 0.1)):  # bounded
                if self.process.poll() is not None:
                    return False
                with contextlib.suppress(httpx.TransportError):
                    if (
                        listens(self.process.pid, self.port)
                        and (await http.get(f"{self.base}/readyz")).is_success
                    ):
                        return True
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def client(self) -> Client:
        return Client(self.base)

    def kill(self) -> None:
        """SIGKILL: no shutdown path runs (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def term(self, timeout: float = 45) -> int:
        """SIGTERM and wait for a graceful exit; the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_bytes(self) -> int:
        """Resident memory of the server process, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")
