"""PostgreSQL LISTEN/NOTIFY: how several turnqueue processes hear each other (M4).

The store sends (``Tx.notify``: delivered only on COMMIT, in commit order; ``Store.notify``
outside a transaction). :class:`Listener` receives, on a dedicated asyncpg connection. Hazard: a
dropped connection loses every notification sent while it was down, so after each reconnect
``on_resync`` is called (the caller tells its subscribers to read a fresh snapshot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg
from sqlalchemy.engine import make_url

from turnqueue.timeouts import within

log = logging.getLogger(__name__)

CHANNEL = "turnqueue"
#: Between a lost LISTEN connection and the next attempt.
RETRY_SECONDS = 0.5
#: ``application_name`` of every listener connection (``pg_stat_activity``).
LISTENER_NAME = "turnqueue-listen"
#: NOTIFY payloads must stay below 8000 bytes: callers never build a larger one (what could
#: grow, such as output, travels as a pointer; ``engine.wire.payload`` refuses the rest).
MAX_PAYLOAD_BYTES = 7_500


def asyncpg_dsn(url: str) -> str:
    """A plain ``postgresql://`` DSN for asyncpg from any of our URL spellings."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    def __init__(
        self,
        dsn: str,
        on_message: Callable[[str], None],
        on_resync: Callable[[], None],
    ) -> None:
        self._dsn = dsn
        self._on_message = on_message
        self._on_resync = on_resync
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self.reconnects = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pg-listener")
        await within(self._connected.wait(), 30)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        first = True
        while True:
            lost = asyncio.Event()
            conn: asyncpg.Connection | None = None
            try:
                # Named, so an operator (or a test) can tell it in pg_stat_activity.
                conn = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": LISTENER_NAME}
                )
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._deliver)
                self._connected.set()
                if not first:
                    self.reconnects += 1
                    log.warning("LISTEN connection re-established; resyncing subscribers")
                    self._on_resync()
                first = False
                # Termination listeners are not called for every kind of loss: poll too.
                while not lost.is_set() and not conn.is_closed():
                    try:
                        await within(lost.wait(), 5)
                    except TimeoutError:
                        await conn.execute("SELECT 1")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN connection lost: %s", exc)
            finally:
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            # Subscribers are told to resync once LISTEN is back (above): telling them now
            # would let them resubscribe into the outage and miss what it loses.
            await asyncio.sleep(RETRY_SECONDS)

    def _deliver(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            self._on_message(payload)
        except Exception:
            log.exception("could not handle a notification")
