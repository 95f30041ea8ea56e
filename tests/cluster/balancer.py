"""A real load balancer for the fleet tests: Debian's HAProxy running ``docs/haproxy.cfg``.

The users' file is run as written; only its ``bind`` line (a free loopback port) and its
``server`` lines (the test's instances) are replaced, so the fleet test proves the config a user
copies. HAProxy runs in the foreground (``-db``) as this test's child and logs to
``balancer.log`` in the test's directory (a failed test's report shows its end).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
from clients import PORT_TRIES, START_WAIT, TLS, free_port, listens, port_taken

CONFIG = Path(__file__).resolve().parents[2] / "docs" / "haproxy.cfg"
#: The header the config adds to every answer: the name of the instance that served it.
SERVED_BY = "x-served-by"


def render(config: str, port: int, backends: dict[str, int]) -> str:
    """``config`` bound to ``127.0.0.1:port`` with ``backends`` (name → loopback port) as its
    servers, in place of the file's own ``bind`` and ``server`` lines."""
    lines = config.splitlines()
    binds = [i for i, line in enumerate(lines) if re.match(r"\s+bind\s", line)]
    servers = [i for i, line in enumerate(lines) if re.match(r"\s+server\s", line)]
    assert len(binds) == 1 and servers, "docs/haproxy.cfg: one bind line and server lines"
    assert servers == list(range(servers[0], servers[-1] + 1)), "server lines are one block"
    indent = re.match(r"\s+", lines[servers[0]])
    pad = indent.group(0) if indent else "    "
    lines[binds[0]] = f"{pad}bind 127.0.0.1:{port}"
    block = [f"{pad}server {name} 127.0.0.1:{p}" for name, p in backends.items()]
    lines[servers[0] : servers[-1] + 1] = block
    return "\n".join(lines) + "\n"


#: Why the fleet tests cannot run here, when they cannot.
MISSING = "HAProxy is not installed: apt-get install -y haproxy (.ci/run does)"


def installed() -> str | None:
    """The ``haproxy`` executable (Debian puts it in /usr/sbin), or None."""
    found = shutil.which("haproxy")
    return found or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


def haproxy() -> str:
    path = installed()
    if path is None:
        raise RuntimeError(MISSING)
    return path


class Balancer:
    """``haproxy -db -f <rendered docs/haproxy.cfg>`` on a free loopback port."""

    def __init__(self, backends: dict[str, int], directory: Path) -> None:
        self.backends = backends
        self._dir = directory
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    async def start(self) -> Balancer:
        """Start it and wait until it listens and every backend passed its health check."""
        for _attempt in range(PORT_TRIES):
            self.port = free_port()
            config = self._dir / "haproxy.cfg"
            config.write_text(render(CONFIG.read_text(), self.port, self.backends))
            log = (self._dir / "balancer.log").open("ab")
            offset = log.tell()
            self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                [haproxy(), "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
            log.close()  # the child has its own descriptor
            if await self._listening():
                await self.wait_up(set(self.backends))
                return self
            if not port_taken(self.log()[offset:]):  # another process took the port: retry
                break
        raise RuntimeError(f"HAProxy did not start: {self.log()[-2000:]}")

    async def _listening(self) -> bool:
        assert self.process is not None
        for _ in range(int(START_WAIT / 0.05)):  # bounded
            if self.process.poll() is not None:
                return False
            if listens(self.process.pid, self.port):
                return True
            await asyncio.sleep(0.05)
        raise RuntimeError("HAProxy did not listen")

    async def wait_up(self, names: set[str], timeout: float = START_WAIT) -> None:
        """Until each of ``names`` has answered through the balancer (its checks passed)."""
        seen: set[str] = set()
        deadline = asyncio.get_running_loop().time() + timeout
        async with httpx.AsyncClient(timeout=5, verify=TLS) as http:
            while not names <= seen:
                try:
                    response = await http.get(f"{self.base}/readyz")
                    if response.status_code == 200 and SERVED_BY in response.headers:
                        seen.add(response.headers[SERVED_BY])
                except httpx.TransportError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"backends never served through HAProxy: {names - seen}")
                await asyncio.sleep(0.05)

    def log(self) -> str:
        path = self._dir / "balancer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
