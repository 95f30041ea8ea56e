"""Raw-socket WebSocket clients in a process of their own (P3, P8, P10).

A client that parses frames with a high-level library in the bench's own process caps what it
measures: a bare Starlette broadcast read by ``websockets`` clients in the bench process peaked
at ~48k deliveries/s, the same broadcast read by raw-socket clients in another process at ~110k
(``../shared/NOTES.md``). So the subscribers of P3, P8 and P10 are this: one subprocess
(``python -m bench.wsreader``) holding every connection of one side, doing the WebSocket
handshake and the graphql-transport-ws start itself, then only splitting frames: each frame is
counted and stamped with ``time.monotonic()`` on arrival (the same clock as the bench process
and the server: CLOCK_MONOTONIC), and the ``"revision":`` number in it, if any, is read with a
byte search. No JSON parsing per frame.

Protocol (lines on stdin / stdout): the first input line is a JSON :class:`Spec`; the reader
answers ``READY <n>`` when every connection is open (and, with a subscription, acknowledged and
its first frame, the snapshot, read: it is not counted). Then commands:

* ``WAIT <count> <seconds>``: answer once ``count`` frames arrived since the last answer, or
  after ``seconds``, with ``FRAMES <json>``: per frame its connection, arrival time and revision
  (-1: none), plus the counts of error frames and of RESYNC errors, connections closed by the
  server and one frame as received;
* ``QUIT``: close everything and exit.

:class:`Readers` runs one from the bench (an async context manager).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import psutil

from bench.common import LOOPBACK, ROOT, WAIT
from turnqueue.timeouts import within

CONNECT_BATCH = 100
REVISION = b'"revision":'


@dataclass(slots=True)
class Spec:
    port: int
    path: str  # "/graphql" or "/bench/ws"
    count: int
    #: graphql-transport-ws subscription sent on every connection, ``$s`` = its session
    query: str | None = None
    sessions: list[str] = field(default_factory=list)  # connection i subscribes sessions[i % n]
    keyed: bool = False  # bare sockets: ``?key=<i>`` (P8 addresses them one by one)
    key_prefix: str = ""  # keyed sockets: ``?key=<key_prefix><i>`` (two keyed sets at once)


@dataclass(slots=True)
class Frames:
    conn: list[int]
    ts: list[float]
    rev: list[int]
    errors: int
    resyncs: int
    closed: int
    sample: str


NEXT_PREFIX = '{"id":"1","type":"next","payload":'


def payload_of(frame: str) -> bytes:
    """The payload of a ``next`` frame as the server encoded it (a bare baseline sends it framed
    the same way, so its frames have the same size)."""
    if frame.startswith(NEXT_PREFIX) and frame.endswith("}"):
        return frame[len(NEXT_PREFIX) : -1].encode()
    return json.dumps(json.loads(frame)["payload"], separators=(",", ":")).encode()


def _frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455 requires clients to mask)."""
    key = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    stream = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")
    return head + key + masked


class Client(asyncio.Protocol):
    """One connection: handshake, then frames to the :class:`Collector`."""

    def __init__(self, index: int, spec: Spec, collector: Collector) -> None:
        self.index = index
        self.spec = spec
        self.collector = collector
        self.buffer = bytearray()
        self.upgraded = False
        self.state = "http"  # http → ack → snapshot → live
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports are not asyncio.Transport subclasses.
        self.transport = cast(asyncio.Transport, transport)
        path = self.spec.path + (
            f"?key={self.spec.key_prefix}{self.index}" if self.spec.keyed else ""
        )
        key = base64.b64encode(os.urandom(16)).decode()
        protocol = "Sec-WebSocket-Protocol: graphql-transport-ws\r\n" if self.spec.query else ""
        self.transport.write(
            f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{self.spec.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{protocol}\r\n".encode()
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.collector.closed += 1
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection {self.index} closed: {exc}"))

    def send(self, message: dict[str, Any]) -> None:
        assert self.transport is not None
        self.transport.write(_frame(0x1, json.dumps(message).encode()))

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if self.buffer:  # a frame was split across reads (rare: frames here are small)
            self.buffer += data
            data = bytes(self.buffer)
            self.buffer.clear()
        if not self.upgraded:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self.buffer += data
                return
            head, data = data[:end], data[end + 4 :]
            if b" 101 " not in head.split(b"\r\n", 1)[0]:
                self.ready.set_exception(ConnectionError(head[:200].decode("latin-1")))
                return
            self.upgraded = True
            if self.spec.query is None:
                self.state = "live"
                self.ready.set_result(None)
            else:
                self.state = "ack"
                self.send({"type": "connection_init", "payload": {}})
        pos = self._frames(data, now)
        if pos < len(data):
            self.buffer += data[pos:]

    def _frames(self, data: bytes, now: float) -> int:
        """Handle every complete frame in ``data``; answers where the first incomplete starts."""
        pos, size = 0, len(data)
        while size - pos >= 2:
            length = data[pos + 1] & 0x7F
            start = pos + 2
            if length == 126:
                if size - pos < 4:
                    break
                length, start = int.from_bytes(data[pos + 2 : pos + 4], "big"), pos + 4
            elif length == 127:
                if size - pos < 10:
                    break
                length, start = int.from_bytes(data[pos + 2 : pos + 10], "big"), pos + 10
            if size - start < length:
                break
            opcode = data[pos] & 0x0F
            payload = data[start : start + length]
            pos = start + length
            if opcode == 0x1:
                if self.state == "live":
                    self.collector.add(self.index, now, payload)
                else:
                    self._text(payload, now)
            elif opcode == 0x9:  # ping
                assert self.transport is not None
                self.transport.write(_frame(0xA, payload))
            elif opcode == 0x8 and self.transport is not None:
                self.transport.close()
        return pos

    def _text(self, payload: bytes, now: float) -> None:
        """A text frame before the subscription is live: the ack, then the snapshot."""
        if self.state == "ack":
            if b"connection_ack" not in payload:
                self.ready.set_exception(ConnectionError(payload[:200].decode()))
                return
            self.state = "snapshot"
            sessions = self.spec.sessions
            variables = {"s": sessions[self.index % len(sessions)]} if sessions else {}
            self.send(
                {
                    "id": "1",
                    "type": "subscribe",
                    "payload": {"query": self.spec.query, "variables": variables},
                }
            )
        elif self.state == "snapshot":
            if b'"next"' not in payload or b'"errors"' in payload:
                self.ready.set_exception(ConnectionError(payload[:300].decode()))
                return
            self.state = "live"
            self.collector.snapshot(self.index, payload)
            self.ready.set_result(None)


class Collector:
    """Every live frame since the last answer."""

    def __init__(self) -> None:
        self.conn: list[int] = []
        self.ts: list[float] = []
        self.rev: list[int] = []
        self.errors = 0
        self.resyncs = 0
        self.closed = 0
        self.sample = b""
        self.snapshots: dict[int, int] = {}
        #: set once ``want`` frames are in (one wake-up per WAIT, not one per frame)
        self.want = 0
        self.reached: asyncio.Future[None] | None = None

    @staticmethod
    def revision(payload: bytes) -> int:
        at = payload.find(REVISION)
        if at < 0:
            return -1
        at += len(REVISION)
        end = at
        while end < len(payload) and 48 <= payload[end] <= 57:
            end += 1
        return int(payload[at:end]) if end > at else -1

    def snapshot(self, index: int, payload: bytes) -> None:
        self.snapshots[index] = self.revision(payload)

    def add(self, index: int, now: float, payload: bytes) -> None:
        self.conn.append(index)
        self.ts.append(now)
        self.rev.append(self.revision(payload))
        if b'"type":"next"' not in payload or b'"errors"' in payload:
            self.errors += 1
            if b"RESYNC" in payload:
                self.resyncs += 1
        if not self.sample:
            self.sample = payload
        if self.reached is not None and len(self.conn) >= self.want and not self.reached.done():
            self.reached.set_result(None)

    def take(self) -> Frames:
        frames = Frames(
            self.conn,
            self.ts,
            self.rev,
            self.errors,
            self.resyncs,
            self.closed,
            self.sample.decode(errors="replace"),
        )
        self.conn, self.ts, self.rev, self.sample = [], [], [], b""
        self.errors = self.resyncs = 0
        return frames


def _same(client: Client) -> Client:
    return client


async def _serve(spec: Spec) -> None:
    loop = asyncio.get_running_loop()
    collector = Collector()
    clients: list[Client] = []
    for start in range(0, spec.count, CONNECT_BATCH):
        batch = [
            Client(i, spec, collector) for i in range(start, min(spec.count, start + CONNECT_BATCH))
        ]
        await within(
            asyncio.gather(
                *(
                    loop.create_connection(functools.partial(_same, c), LOOPBACK, spec.port)
                    for c in batch
                )
            ),
            WAIT,
        )
        await within(asyncio.gather(*(c.ready for c in batch)), WAIT)
        clients += batch
    out = sys.stdout.buffer
    snapshots = json.dumps(collector.snapshots)
    out.write(f"READY {len(clients)} {snapshots}\n".encode())
    out.flush()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().split()
        if not line or line[0] == "QUIT":
            break
        if line[0] == "WAIT":
            collector.want, seconds = int(line[1]), float(line[2])
            if len(collector.conn) < collector.want and seconds > 0:
                collector.reached = loop.create_future()
                with contextlib.suppress(TimeoutError):
                    await within(collector.reached, seconds)
                collector.reached = None
            out.write(b"FRAMES " + json.dumps(asdict(collector.take())).encode() + b"\n")
            out.flush()
    for client in clients:
        if client.transport is not None:
            client.transport.close()


def main() -> None:
    spec = Spec(**json.loads(sys.stdin.readline()))
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_serve(spec))


class Readers:
    """``python -m bench.wsreader`` for one side, from the bench process."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None
        #: the revision of each connection's snapshot (subscriptions only)
        self.snapshots: dict[int, int] = {}

    async def __aenter__(self) -> Readers:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.wsreader",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            limit=1 << 26,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(asdict(self.spec)).encode() + b"\n")
        # Opening thousands of subscriptions takes a while: WAIT per batch of connections.
        budget = WAIT * (1 + self.spec.count // CONNECT_BATCH)
        line = await within(self._line(), budget)
        if not line.startswith("READY "):
            raise RuntimeError(f"the WebSocket readers did not start: {line[:300]}")
        _, count, snapshots = line.split(" ", 2)
        if int(count) != self.spec.count:
            raise RuntimeError(f"only {count} of {self.spec.count} connections opened")
        self.snapshots = {int(k): v for k, v in json.loads(snapshots).items()}
        return self

    async def _line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            code = await self.proc.wait()
            raise RuntimeError(f"the WebSocket readers exited ({code})")
        return line.decode()

    def cpu(self) -> float:
        """CPU seconds (user + system) the reader process has used so far."""
        assert self.proc is not None
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    async def wait(self, count: int, seconds: float = WAIT) -> Frames:
        """The frames read since the last call, once there are ``count`` or after ``seconds``."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"WAIT {count} {seconds}\n".encode())
        line = await within(self._line(), seconds + WAIT)
        if not line.startswith("FRAMES "):
            raise RuntimeError(f"unexpected answer from the readers: {line[:300]}")
        return Frames(**json.loads(line[7:]))

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        with contextlib.suppress(Exception):
            self.proc.stdin.write(b"QUIT\n")
            await self.proc.stdin.drain()
        try:
            await within(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


if __name__ == "__main__":
    main()
