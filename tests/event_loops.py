"""Which event loops a test runs on: asyncio's own and uvloop (the loop ``turnqueue serve`` uses).

``turnqueue serve`` runs uvicorn with its default loop, which is **uvloop** (``uvicorn[standard]``);
pytest — and an application embedding turnqueue — use asyncio's own. The two differ where it
matters most to us: subprocess transports and pipes (the ``command`` agent), sockets and the
WebSocket transport. A conftest opts its tests in through pytest-asyncio's loop-factory hook::

    from event_loops import loops_for

    def pytest_asyncio_loop_factories(config, item):
        return loops_for(item, ...)

Each such test then runs once per loop, with ids ``[asyncio]`` and ``[uvloop]``. Only cheap suites
opt in (CI time): a test whose loop drives only a client of a server *process* gains nothing.
Every other async test runs on asyncio's loop (tests/conftest.py).

``TURNQUEUE_TEST_LOOP=uvloop ./tq test`` runs *every* async test on uvloop alone (the whole suite
the way the server runs; not doubled, so about as long as a normal run), ``=asyncio`` every test on
asyncio's loop alone.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Mapping

import pytest
import uvloop

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

LOOPS: dict[str, LoopFactory] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
ASYNCIO_ONLY: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
ENV = "TURNQUEUE_TEST_LOOP"


def forced() -> Mapping[str, LoopFactory] | None:
    """The one loop ``TURNQUEUE_TEST_LOOP`` names for every test, or None when it is unset."""
    name = os.environ.get(ENV, "")
    if not name:
        return None
    if name not in LOOPS:
        raise pytest.UsageError(f"{ENV}={name!r}: expected one of {', '.join(LOOPS)}")
    return {name: LOOPS[name]}


def loops_for(
    item: pytest.Item,
    *,
    only: Collection[str] | None = None,
    except_: Collection[str] = (),
) -> Mapping[str, LoopFactory]:
    """Both loops for the test modules named in ``only`` (all when None) but not in ``except_``;
    asyncio's loop alone for the others (their ids stay as they were)."""
    if (one := forced()) is not None:
        return one
    name = item.path.name
    if name in except_ or (only is not None and name not in only):
        return ASYNCIO_ONLY
    return LOOPS


def default_loops(item: pytest.Item) -> Mapping[str, LoopFactory]:
    """Where no conftest below opts in: asyncio's loop, or the one ``TURNQUEUE_TEST_LOOP`` names."""
    return forced() or ASYNCIO_ONLY
