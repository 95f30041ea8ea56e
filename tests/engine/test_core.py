"""The engine's core (``engine/core.py``): what the queue status says about itself, the checks
every rule shares, and the background work it owns."""

from __future__ import annotations

import asyncio
import logging

import pytest
from engine_helpers import PRINCIPAL, new_session
from test_queue_refusals import refusal

from turnqueue.domain import HoldReason, SessionState
from turnqueue.engine import Engine
from turnqueue.errors import Conflict, ErrorCode


async def test_q11_q13_a_queue_status_names_its_session_and_its_capacity(engine: Engine) -> None:
    _, session = await new_session(engine)
    status = await engine.queue_status(session.id)
    assert (status.session_id, status.max) == (session.id, engine.core.settings.queue_limit)
    assert status.max is not None


async def test_q9_a_session_that_cannot_take_a_prompt_holds_its_queue_as_not_promptable(
    engine: Engine,
) -> None:
    _, session = await new_session(engine)
    async with engine.core.store.transaction() as tx:  # a session whose agent failed for good
        await tx.set_session_state(session.id, SessionState.FAILED)
    status = await engine.queue_status(session.id)
    assert status.held_by == (HoldReason.NOT_PROMPTABLE,)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (" \n\t", "content must not be empty"),
        ("a\x00b", "content must not contain NUL characters"),
        ("x\ud800y", "content must be valid Unicode (it holds a lone surrogate)"),
        (None, "content is {size} bytes; the limit is {limit}"),
    ],
    ids=["blank", "nul", "lone-surrogate", "oversized"],
)
async def test_s3_content_that_cannot_be_a_prompt_is_refused_on_its_field(
    engine: Engine, content: str | None, message: str
) -> None:
    """S3: blank content, a NUL character (PostgreSQL text cannot hold it: refused alike on
    both stores), a lone surrogate (no UTF-8 for it) or more UTF-8 bytes than the limit is
    INVALID_INPUT on ``content``, and nothing changes."""
    _, session = await new_session(engine)
    limit = engine.core.settings.max_content_bytes
    if content is None:
        content = "é" * limit  # two bytes each
        message = message.format(size=2 * limit, limit=limit)
    before = await engine.queue_status(session.id)
    assert await refusal(engine.send_message(PRINCIPAL, session.id, content)) == (
        ErrorCode.INVALID_INPUT,
        message,
        ["content"],
    )
    assert await engine.queue_status(session.id) == before


async def test_a_background_tasks_fault_is_logged_under_its_name_and_a_refusal_is_not(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Background work is owned by the core: a fault of a task nobody awaits is logged with
    the task's name (not lost); an expected refusal (a UserFacingError: its caller's answer)
    is not a fault."""

    async def fails() -> None:
        raise RuntimeError("boom")

    async def refuses() -> None:
        raise Conflict(ErrorCode.QUEUE_FULL, "full")

    with caplog.at_level(logging.ERROR, logger="turnqueue.engine.core"):
        tasks = [
            engine.core.spawn(fails(), "test:fails"),
            engine.core.spawn(refuses(), "test:refuses"),
        ]
        # Each task's done callbacks run in the order added: the core's (added by spawn) before
        # gather's, so once gather returns the core has handled both.
        await asyncio.gather(*tasks, return_exceptions=True)
    faults = [r for r in caplog.records if r.name == "turnqueue.engine.core"]
    assert [r.getMessage() for r in faults] == ["background task test:fails failed"]
    assert faults[0].exc_info is not None and str(faults[0].exc_info[1]) == "boom"
