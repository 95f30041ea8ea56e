"""The benchmark server: turnqueue's real app (``create_app``) plus the baselines and bench tools.

``python -m bench.server --db URL`` listens on a free loopback port, prints ``PORT <n>`` and
serves until SIGTERM. Extra routes, all under ``/bench``:

* ``POST /bench/setup`` ``{"sessions": n, "entries": k, "hold": false}`` — n sessions of the local
  user, auto-run OFF, k queued entries each; answers their ids and entry ids. ``hold``: each
  session runs a turn of the ``hold`` agent (scripted, a week long: its first chunk, then
  nothing), for P7's ``output`` events.
* ``POST /bench/plain/set-auto-run`` — P4's old baseline (an informative row now): the same
  engine call and queue read as the ``setAutoRun`` mutation, answered as plain JSON by a
  Starlette endpoint.
* ``/bench/record/…``, ``/bench/replay/set-auto-run``, ``/bench/bare-frame`` — P4's and P8's
  replay baseline: the mutation's own SQL replayed on a raw driver connection
  (``bench/baseline.py``).
* ``POST /bench/handwritten/set-auto-run`` — P4's and P8's baseline (issue 27): the job done with
  hand-written SQL on the raw driver (``bench/handwritten.py``).
* ``WS /bench/ws`` and ``POST /bench/broadcast`` — P3/P5's baseline: bare Starlette WebSockets;
  the broadcast sends the posted payload as a graphql-transport-ws ``next`` frame to every one.
  ``/bench/ws?key=k`` also makes the socket addressable as ``k`` (P8's baseline).
* ``POST /bench/profile/start`` / ``/bench/profile/stop`` ``{"path": …}`` — pyinstrument.
* ``POST /bench/gc`` — collect garbage, answer this process's RSS and its count of objects the
  garbage collector tracks.
* ``POST /bench/types`` — collect garbage, answer the objects the garbage collector tracks,
  counted per type name (what grows between two calls: P7's objects per turn).
* ``POST /bench/events`` ``{"session": id, "kind": k, "start": i, "count": n, "listeners": m}``
  — P7's events, one after the other, once ``m`` streams (default 0) listen on the session's
  bus: ``queue`` toggles auto-run through the engine (a queue revision each), ``cancellation``
  publishes C2 transitions and ``output`` streamed chunks of the session's ``hold`` turn on the
  bus, as the engine does (a stream reads the log for a turn it does not know: chunks of made-up
  turns stream nothing), and ``turns`` runs a real turn of the scripted agent
  (``TURNQUEUE_SCRIPTED_TURN_SECONDS=0``: its text, then its end) to its end. Answers the marker
  of the last one (see bench/p7_events.py).
* ``POST /bench/pace``, ``/bench/pace/wait`` — P10's paced events (``bench/pacer.py``).
* ``POST /bench/bare-events`` ``{"count": n, "payload": text}`` — P7's baseline: n ``next``
  frames to every bare WebSocket, one event after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from bench import sqlrecord
from bench.baseline import replay_routes
from bench.handwritten import handwritten_routes
from bench.pacer import pace_routes
from turnqueue.agents import build_agents
from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.api.view import LOCAL_PRINCIPAL
from turnqueue.app import create_app
from turnqueue.bus import Event, EventKind, Watch
from turnqueue.domain import CancellationStatus, OutputChunk, TurnStatus
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.timeouts import within

#: The agent profile whose turns last a week (P7's ``output`` events stream on one).
HOLD = "hold"
HOLD_SECONDS = 7 * 24 * 3600.0
RUNNING = TurnStatus.RUNNING
#: P7's cancellation revisions start above any the engine has published for a bench session.
CANCELLATION_BASE = 1_000
#: P7: events a bus subscription may hold before ``/bench/events`` waits for it (buffer: 256).
PACE = 64


def _queue_json(status: Any) -> dict[str, Any]:
    return {
        "revision": status.revision,
        "autoRun": status.auto_run,
        "pauseReason": status.pause_reason.value if status.pause_reason else None,
        "heldBy": [h.value for h in status.held_by],
        "count": len(status.entries),
    }


def bench_routes(app: Starlette, database_url: str) -> list[Any]:
    sockets: set[WebSocket] = set()
    keyed: dict[str, WebSocket] = {}
    profiler: dict[str, Any] = {}

    def engine() -> Engine:
        found: Engine = app.state.engine
        return found

    #: P7's ``output`` events: each held session's running turn and the end of its logged text
    held: dict[str, tuple[str, int]] = {}

    async def setup(request: Request) -> JSONResponse:
        body = await request.json()
        created: list[dict[str, Any]] = []
        agent = HOLD if body.get("hold") else None
        for i in range(int(body["sessions"])):
            _, session = await engine().create_task(LOCAL_PRINCIPAL, f"bench {i}", agent)
            await engine().set_auto_run(LOCAL_PRINCIPAL, session.id, False, None)
            if agent is not None:
                held[session.id] = await _hold(session.id)
            entries = []
            for k in range(int(body.get("entries", 0))):
                queued = await engine().enqueue(LOCAL_PRINCIPAL, session.id, f"entry {k}", None)
                entries.append(queued.entry.id)
            created.append({"id": session.id, "entries": entries})
        return JSONResponse({"sessions": created})

    async def _hold(sid: str) -> tuple[str, int]:
        """Start the session's week-long turn; its id once its first chunk is logged, and the
        end of that text (a bench tool: it reads the runner)."""
        admission = await engine().send_message(LOCAL_PRINCIPAL, sid, "hold")
        assert admission.turn is not None
        for _ in range(60_000):  # at most ~60 s
            runner = engine().core.runners.get(sid)
            if runner is not None and runner.log is not None and runner.log.committed:
                return admission.turn.id, runner.log.committed
            await asyncio.sleep(0.001)
        raise RuntimeError("the hold turn logged nothing")

    async def plain_set_auto_run(request: Request) -> JSONResponse:
        body = await request.json()
        sid = body["sessionId"]
        applied = await engine().set_auto_run(LOCAL_PRINCIPAL, sid, bool(body["autoRun"]), None)
        queue = _queue_json(applied.queue)
        return JSONResponse({"dispatched": applied.turn is not None, "queue": queue})

    async def bare_ws(websocket: WebSocket) -> None:
        await websocket.accept()
        sockets.add(websocket)
        key = websocket.query_params.get("key")
        if key is not None:
            keyed[key] = websocket
        try:
            while True:
                await websocket.receive_text()
        except WebSocketDisconnect:
            pass
        finally:
            sockets.discard(websocket)
            if key is not None and keyed.get(key) is websocket:
                del keyed[key]

    async def broadcast(request: Request) -> JSONResponse:
        payload = (await request.body()).decode()
        frame = '{"id":"1","type":"next","payload":' + payload + "}"
        sent = 0
        for websocket in list(sockets):
            try:
                await websocket.send_text(frame)
                sent += 1
            except Exception:
                sockets.discard(websocket)
        return JSONResponse({"sent": sent})

    async def profile_start(_request: Request) -> JSONResponse:
        from pyinstrument import Profiler

        profiler["p"] = Profiler(interval=0.0005, async_mode="disabled")
        profiler["p"].start()
        return JSONResponse({"ok": True})

    async def profile_stop(request: Request) -> JSONResponse:
        body = await request.json()
        p = profiler.pop("p")
        p.stop()
        text = p.output_text(unicode=False, color=False)
        await asyncio.to_thread(Path(body["path"]).write_text, text)
        return JSONResponse({"ok": True})

    async def collect(_request: Request) -> JSONResponse:
        gc.collect()
        await asyncio.sleep(0.2)
        gc.collect()
        rss = psutil.Process().memory_info().rss
        objects = len(gc.get_objects())
        return JSONResponse({"rss": rss, "sockets": len(sockets), "objects": objects})

    async def types(_request: Request) -> JSONResponse:
        gc.collect()
        await asyncio.sleep(0.2)
        gc.collect()
        counted = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
        return JSONResponse(dict(counted))

    async def allocations(_request: Request) -> JSONResponse:
        """With PYTHONTRACEMALLOC set: the first call takes a snapshot, the next ones answer the
        20 source lines whose live allocations grew most since it (P5's investigation)."""
        import tracemalloc

        gc.collect()
        snapshot = tracemalloc.take_snapshot()
        if "snapshot" not in profiler:
            profiler["snapshot"] = snapshot
            return JSONResponse({"top": []})
        diff = snapshot.compare_to(profiler["snapshot"], "lineno")
        return JSONResponse({"top": [str(stat) for stat in diff[:20]]})

    async def _drained(sid: str, most: int) -> None:
        """Wait until no bus subscription of ``sid`` holds more than ``most`` events (bounded; a
        watch holds none). Reads the bus's subscribers: a bench tool, not product code."""
        bus = engine().core.bus
        for _ in range(60_000):  # at most ~60 s
            subs = bus._subscribers.get(sid, ())
            if all(isinstance(sub, Watch) or sub.pending() <= most for sub in subs):
                return
            await asyncio.sleep(0.001)

    async def events(request: Request) -> JSONResponse:
        body = await request.json()
        sid, kind = str(body["session"]), str(body["kind"])
        start, count = int(body["start"]), int(body["count"])
        bus = engine().core.bus
        for _ in range(60_000):  # at most ~60 s: until the streams listen (a bench tool)
            if len(bus._subscribers.get(sid, ())) >= int(body.get("listeners", 0)):
                break
            await asyncio.sleep(0.001)
        marker = 0
        for i in range(start, start + count):
            if kind == "queue":  # auto-run starts OFF (setup): even i turns it on, odd off
                await engine().set_auto_run(LOCAL_PRINCIPAL, sid, i % 2 == 0, None)
            elif kind == "cancellation":
                marker = CANCELLATION_BASE + i
                status = CancellationStatus(sid, i % 2 == 0, marker)
                bus.publish(Event(EventKind.CANCELLATION, sid, marker, cancellation=status))
            elif kind == "output":  # the hold turn's next chunk (its log ends before them)
                turn_id, logged = held[sid]
                text = "chunk of"
                chunk = OutputChunk(sid, turn_id, logged + i * len(text), text, False, RUNNING)
                bus.publish(Event(EventKind.OUTPUT, sid, chunk=chunk))
                marker = i + 1  # frame 0 is the stream's first read: the logged text
            elif kind == "turns":
                with bus.subscribe(sid, [EventKind.OUTPUT]) as output:
                    await engine().send_message(LOCAL_PRINCIPAL, sid, f"turn {i}")
                    while True:  # to the turn's end
                        event = await within(output.get(), 60)
                        if event.chunk is not None and event.chunk.done:
                            break
                marker = i
            else:
                return JSONResponse({"error": f"unknown kind {kind}"}, status_code=400)
            await asyncio.sleep(0)  # let the deliveries run, as between two real events
            await _drained(sid, PACE)
        # Nothing in flight when this answers: a stream may already have yielded the newest
        # state (a shared read can return a newer snapshot than its event) while older events
        # still wait in its bus buffer; the next batch would overflow it (RESYNC).
        await _drained(sid, 0)
        if kind == "queue":
            marker = (await engine().queue_status(sid)).revision
        return JSONResponse({"marker": marker})

    async def bare_events(request: Request) -> JSONResponse:
        body = await request.json()
        frame = '{"id":"1","type":"next","payload":' + str(body["payload"]) + "}"
        for _ in range(int(body["count"])):
            for websocket in list(sockets):
                try:
                    await websocket.send_text(frame)
                except Exception:
                    sockets.discard(websocket)
        return JSONResponse({"sent": len(sockets)})

    return [
        *replay_routes(database_url, keyed),
        *handwritten_routes(database_url, keyed),
        *pace_routes(engine),
        Route("/bench/events", events, methods=["POST"]),
        Route("/bench/bare-events", bare_events, methods=["POST"]),
        Route("/bench/allocations", allocations, methods=["POST"]),
        Route("/bench/setup", setup, methods=["POST"]),
        Route("/bench/plain/set-auto-run", plain_set_auto_run, methods=["POST"]),
        WebSocketRoute("/bench/ws", bare_ws),
        Route("/bench/broadcast", broadcast, methods=["POST"]),
        Route("/bench/profile/start", profile_start, methods=["POST"]),
        Route("/bench/profile/stop", profile_stop, methods=["POST"]),
        Route("/bench/gc", collect, methods=["POST"]),
        Route("/bench/types", types, methods=["POST"]),
    ]


def build(database_url: str) -> Starlette:
    settings = Settings(database_url=database_url, queue_max=0, log_level="WARNING")
    sqlrecord.install()  # before the store opens a connection: the recorder must know them all
    agents, _default = build_agents(settings)
    agents[HOLD] = ScriptedAgent(HOLD_SECONDS)
    app = create_app(settings, agents=agents)
    for route in reversed(bench_routes(app, database_url)):
        app.router.routes.insert(0, route)
    return app


async def serve(database_url: str) -> None:
    config = uvicorn.Config(
        build(database_url),
        host="127.0.0.1",
        port=0,
        ws="auto",
        lifespan="on",
        log_level="warning",
        ws_ping_interval=None,
        ws_per_message_deflate=False,
        backlog=4096,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(6000):  # 60 s
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    if not server.started:
        raise RuntimeError("the server did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGTERM, lambda: setattr(server, "should_exit", True)
    )
    await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # The loop `turnqueue serve` runs on: uvicorn's loop="auto" picks uvloop when it is installed
    # (uvicorn[standard] installs it); the baselines served here run on it too.
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.db))
    else:
        uvloop.run(serve(args.db))


if __name__ == "__main__":
    main()
