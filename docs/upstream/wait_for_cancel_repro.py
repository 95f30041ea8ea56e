"""``asyncio.wait_for`` swallows a cancellation that arrives in the loop iteration in which the
awaited thing finishes (CPython gh-86296; fixed in 3.12, whose ``wait_for`` is built on
``asyncio.timeout``). Run with Python 3.11 and 3.12:

    3.11.7 wait_for: CANCEL SWALLOWED, the task is still running
    3.11.7 asyncio.timeout: cancel honoured
    3.12.1 wait_for: cancel honoured

turnqueue's workaround is turnqueue/timeouts.py (``within``), and ruff bans ``wait_for``."""

import asyncio
import contextlib
import sys


async def follower(queue: asyncio.Queue[int], use_timeout: bool) -> None:
    while True:  # a listener's loop: it ends only when cancelled
        if use_timeout:
            async with asyncio.timeout(3600):
                await queue.get()
        else:
            await asyncio.wait_for(queue.get(), 3600)  # noqa: TID251


async def cancelled(use_timeout: bool) -> bool:
    queue: asyncio.Queue[int] = asyncio.Queue()
    task = asyncio.create_task(follower(queue, use_timeout))
    await asyncio.sleep(0)
    queue.put_nowait(1)  # the inner get() completes...
    task.cancel()  # ...and the cancel arrives in the same loop iteration
    done, _ = await asyncio.wait([task], timeout=0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return bool(done)


async def main() -> None:
    for use_timeout in (False, True):
        ok = await cancelled(use_timeout)
        what = "asyncio.timeout" if use_timeout else "wait_for"
        verdict = "cancel honoured" if ok else "CANCEL SWALLOWED, the task is still running"
        print(f"{sys.version.split()[0]} {what}: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
