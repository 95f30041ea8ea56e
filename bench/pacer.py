"""The bench server's paced events (P10): one ``setAutoRun`` toggle per session per second, caused
inside the server through the engine (as an agent's progress is), spread over the second.

* ``POST /bench/pace`` ``{"sessions": [ids], "seconds": d}`` — starts pacing and answers at once
  ``{"start": t, "base": [revision of each session]}``. Session i's event j is scheduled at
  ``t + j + i / len(sessions)`` (``time.monotonic()``, the clock of every process here) and
  toggles auto-run (ON when j is even: the sessions start OFF), so it makes revision
  ``base[i] + j + 1``. Each session's events run one after the other: a late one delays the next
  (latency is measured from the schedule, so an overloaded server shows as latency, not as
  fewer events).
* ``POST /bench/pace/wait`` — waits (at most 30 s) for the pacing to finish; answers
  ``{"done": bool, "late_ms": the latest start behind its schedule}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from turnqueue.api.view import LOCAL_PRINCIPAL
from turnqueue.engine import Engine

LEAD = 0.5  # seconds between the answer and the first event


def pace_routes(engine: Callable[[], Engine]) -> list[Route]:
    state: dict[str, Any] = {}

    async def session(start: float, i: int, count: int, sid: str, seconds: int) -> None:
        for j in range(seconds):
            delay = start + j + i / count - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                state["late"] = max(state["late"], -delay)
            await engine().set_auto_run(LOCAL_PRINCIPAL, sid, j % 2 == 0, None)

    async def pace(request: Request) -> JSONResponse:
        body = await request.json()
        sids, seconds = [str(s) for s in body["sessions"]], int(body["seconds"])
        base = [(await engine().queue_status(sid)).revision for sid in sids]
        start = time.monotonic() + LEAD
        state["late"] = 0.0
        state["task"] = asyncio.gather(
            *(session(start, i, len(sids), sid, seconds) for i, sid in enumerate(sids))
        )
        return JSONResponse({"start": start, "base": base})

    async def wait(_request: Request) -> JSONResponse:
        task = state["task"]
        done, _ = await asyncio.wait([task], timeout=30)
        if done:
            task.result()
        return JSONResponse({"done": bool(done), "late_ms": state["late"] * 1000})

    return [
        Route("/bench/pace", pace, methods=["POST"]),
        Route("/bench/pace/wait", wait, methods=["POST"]),
    ]
