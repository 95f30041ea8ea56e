"""turnqueue.timeouts.within: a bounded wait that lets every cancellation through (the hazard of
Python 3.11's ``wait_for``, gh-86296, behind a cluster test that hung at its teardown)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from turnqueue.timeouts import bounded, within


async def _follow(queue: asyncio.Queue[int]) -> None:
    while True:
        await within(queue.get(), 3600)


async def test_a_cancel_that_meets_a_result_still_ends_the_waiting_loop() -> None:
    """The cancel arrives in the loop iteration in which the awaited get() completes: the loop
    ends (with 3.11's ``wait_for`` it keeps running and awaiting it never returns)."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    task = asyncio.create_task(_follow(queue))
    await asyncio.sleep(0)
    queue.put_nowait(1)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=5)
    if not done:  # leave nothing running
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert done, "the cancellation was swallowed"
    assert task.cancelled()


async def test_within_answers_the_result_and_bounds_the_wait() -> None:
    assert await within(asyncio.sleep(0, "ok"), 1) == "ok"
    with pytest.raises(TimeoutError):
        await within(asyncio.Event().wait(), 0.01)


async def test_bounded_ignores_a_timeout_and_a_failure_but_not_a_cancel() -> None:
    """``bounded``: ``within`` for a wait whose outcome nobody reads."""
    await bounded(asyncio.Event().wait(), 0.01)

    async def fails() -> None:
        raise OSError("gone")

    await bounded(fails(), 1)
    task = asyncio.create_task(bounded(asyncio.Event().wait(), 3600))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
