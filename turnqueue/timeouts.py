"""Bounded waits that never swallow a cancellation.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when a cancellation arrives in the
same loop iteration (CPython gh-86296), so a loop waiting with it outlives the ``cancel()`` meant
to end it; ``asyncio.timeout`` lets every external cancellation through. ruff bans ``wait_for``
(TID251); reproduction: docs/upstream/wait_for_cancel_repro.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``, raising :class:`TimeoutError` after ``timeout`` seconds (``None``:
    no bound). On timeout the awaitable is cancelled, as with ``wait_for``."""
    async with asyncio.timeout(timeout):
        return await awaitable


async def bounded(awaitable: Awaitable[object], timeout: float) -> None:
    """Await ``awaitable`` for at most ``timeout`` seconds (then cancel it); its failure or
    timeout is ignored (a stop, a kill, a last word to an agent that may not listen, a pause)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout):
            await awaitable
