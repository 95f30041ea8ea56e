"""One queue-status read per event, shared by every subscriber of the session.

After a queue event every subscriber of that session re-reads the snapshot. Without sharing, a
thousand subscribers mean a thousand identical database reads per event; here a read is shared
by every caller it is new enough for.

Hazard (why the rule is what it is): a read may only serve a caller who needs revision ``r`` if
the read *started* after the event carrying ``r`` was published. Events are published after
their commit, so such a read sees that commit. ``published`` is the newest queue revision this
process has published or relayed for the session; a read remembers the value it saw when it
started. Callers that must see their own writes (mutation payloads) never use this path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import QueueStatus

#: Sessions remembered at most; beyond it the memory is simply forgotten (a cache, not state).
MAX_SESSIONS = 10_000


class SharedReads:
    def __init__(self, bus: EventBus, read: Callable[[str], Awaitable[QueueStatus]]) -> None:
        self._read = read
        self._bus = bus
        self._published: dict[str, int] = {}
        self._latest: dict[str, tuple[int, asyncio.Future[QueueStatus]]] = {}
        bus.add_listener(self._note)

    def _note(self, event: Event) -> None:
        if event.kind is EventKind.QUEUE and event.revision > 0:
            if len(self._published) >= MAX_SESSIONS:
                self._published.clear()
                self._latest.clear()
            sid = event.session_id
            self._published[sid] = max(self._published.get(sid, 0), event.revision)

    async def queue_status_after(self, session_id: str, revision: int) -> QueueStatus:
        """A snapshot that includes the change published with ``revision``."""
        shared = self._latest.get(session_id)
        if shared is None or shared[0] < revision or _failed(shared[1]):
            started_at = self._published.get(session_id, 0)
            if started_at < revision:  # the event is not (yet) known here: read for oneself
                return await self._read(session_id)
            future = asyncio.ensure_future(self._read(session_id))
            shared = (started_at, future)
            self._latest[session_id] = shared
        return await asyncio.shield(shared[1])


def _failed(future: asyncio.Future[QueueStatus]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)
