"""A REAL ``turnqueue serve`` subprocess on a free port with a fresh SQLite database, and a small
HTTP GraphQL helper to arrange state (for the frontend examples' tests).

The server serves the built web page at ``/`` when it exists (``turnqueue.api.webui``;
``TURNQUEUE_WEB_DIST`` points it at a build).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import PORT_TRIES, TLS, free_port, listens, port_taken

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90.0  # a bound: a loaded 2-core machine took 26 s to start one
OUTPUT_QUERY = """subscription($s: ID!, $t: ID) {
  turnOutput(sessionId: $s, turnId: $t) { offset text done status } }"""


def serve_command(port: int) -> list[str]:
    """``turnqueue serve`` (the venv's console script, else ``python -m turnqueue``)."""
    script = Path(sys.executable).with_name("turnqueue")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "turnqueue"]
    return [*launcher, "serve", "--port", str(port)]


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    #: Sent as ``Authorization: Bearer …`` when the server has ``TURNQUEUE_TOKENS``.
    token: str | None = None

    @property
    def graphql_url(self) -> str:
        return f"{self.base_url}/graphql"

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        """POST a query or mutation; fail the test on top-level errors."""
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        response = httpx.post(
            self.graphql_url,
            json={"query": query, "variables": variables},
            headers=headers,
            verify=TLS,
        )
        body: dict[str, Any] = response.json()
        assert not body.get("errors"), body
        data: dict[str, Any] = body["data"]
        return data

    def mutate(self, name: str, input_type: str, selection: str, **fields: Any) -> dict[str, Any]:
        """Run one mutation with ``input``; fail the test on its ``userErrors``."""
        query = (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            f"{{ {selection} userErrors {{ code message }} }} }}"
        )
        payload: dict[str, Any] = self.gql(query, input=fields)[name]
        assert payload["userErrors"] == [], payload
        return payload

    def create_session(self, title: str) -> str:
        payload = self.mutate("createTask", "CreateTaskInput", "session { id }", title=title)
        session_id: str = payload["session"]["id"]
        return session_id

    def send(self, session_id: str, content: str) -> dict[str, Any]:
        return self.mutate(
            "sendMessage",
            "SendMessageInput",
            "turn { id } queuedEntry { id }",
            sessionId=session_id,
            content=content,
        )

    def enqueue(self, session_id: str, content: str) -> str:
        payload = self.mutate(
            "enqueueMessage",
            "EnqueueMessageInput",
            "entry { id } dispatched",
            sessionId=session_id,
            content=content,
        )
        entry_id: str = payload["entry"]["id"]
        return entry_id

    def set_auto_run(self, session_id: str, auto_run: bool) -> dict[str, Any]:
        return self.mutate(
            "setAutoRun",
            "SetAutoRunInput",
            "dispatched queue { autoRun pauseReason revision entries { content } }",
            sessionId=session_id,
            autoRun=auto_run,
        )

    def output(
        self, session_id: str, turn_id: str, min_chars: int | None = None
    ) -> tuple[str, str]:
        """A turn's output read from the server's durable log: ``turnOutput`` over GraphQL over
        SSE from offset 0, until the turn's end, or (``min_chars``) until at least that many
        characters have come. Answers the text and the last chunk's status."""
        headers = {"accept": "text/event-stream"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        params = {"query": OUTPUT_QUERY, "variables": json.dumps({"s": session_id, "t": turn_id})}
        text, status = "", "RUNNING"
        with httpx.stream(
            "GET", self.graphql_url, params=params, headers=headers, timeout=30
        ) as response:
            for line in response.iter_lines():
                if not line.startswith("data:") or line == "data:":
                    continue
                chunk = json.loads(line[len("data:") :]).get("data", {}).get("turnOutput")
                if chunk is None:
                    continue
                assert chunk["offset"] == len(text), (chunk, text)
                text, status = text + chunk["text"], chunk["status"]
                if chunk["done"] or (min_chars is not None and len(text) >= min_chars):
                    break
        return text, status

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_server(tmp_dir: Path, **env: str) -> Iterator[Server]:
    """Start ``turnqueue serve`` (SQLite in ``tmp_dir``) and stop it afterwards. A port taken
    between :func:`free_port` and the bind (another test's server) is retried on a new one."""
    log_path = tmp_dir / "server.log"
    for attempt in range(PORT_TRIES):
        port = free_port()
        environment = {
            **os.environ,
            "TURNQUEUE_DATABASE_URL": f"sqlite:///{tmp_dir / 'turnqueue.db'}",
            "TURNQUEUE_TOKENS": "",
            "TURNQUEUE_HOST": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                serve_command(port),
                cwd=tmp_dir,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = Server(f"http://127.0.0.1:{port}", process, log_path)
        try:
            if _wait_healthy(server, retry=attempt + 1 < PORT_TRIES):
                break
        except BaseException:
            _stop(process)
            raise
    try:
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_healthy(server: Server, *, retry: bool) -> bool:
    """True once our process listens and is healthy; False if it exited because its port was
    taken and ``retry``."""
    deadline = time.monotonic() + START_TIMEOUT
    port = int(server.base_url.rsplit(":", 1)[1])
    with httpx.Client(timeout=1, verify=TLS) as http:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                if retry and port_taken(server.log()):
                    return False
                pytest.fail(f"turnqueue serve exited early:\n{server.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if (
                    listens(server.process.pid, port)
                    and http.get(f"{server.base_url}/healthz").status_code == 200
                ):
                    return True
            time.sleep(0.05)  # polling the server's readiness, not waiting for a result
    pytest.fail(f"turnqueue serve did not become healthy:\n{server.log()}")


ServerFactory = Callable[..., contextlib.AbstractContextManager[Server]]


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """One process at a time checks and (re)installs or (re)builds in ``directory`` (pytest-xdist
    workers share the checkout: two ``npm ci`` at once would break each other). The lock file is
    in the temporary directory, named after ``directory``."""
    tag = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"turnqueue-tests-{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


#: Debian's chromium (CI installs it) and the flags every browser test starts it with.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
