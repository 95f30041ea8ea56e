"""S2 in the engine: a session another principal owns is NotFound, whether or not its owner is
already remembered (``Access.check_session`` caches owners; ownership never changes)."""

from __future__ import annotations

import uuid

import pytest
from engine_helpers import new_session

from turnqueue.engine import Engine
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.store.protocol import SessionView


async def _queued(engine: Engine, session_id: str) -> SessionView:
    async with engine.store.read() as tx:
        view = await tx.view(session_id)
    assert view is not None
    return view


async def test_s2_a_remembered_owner_still_refuses_another_principal(engine: Engine) -> None:
    task, session = await new_session(engine)
    await engine.set_auto_run(task.owner, session.id, False, None)
    await engine.enqueue(task.owner, session.id, "mine", None)  # the owner is now remembered
    assert session.id in engine.access.owners

    with pytest.raises(NotFound):
        await engine.enqueue("mallory", session.id, "theirs", None)
    with pytest.raises(NotFound):
        await engine.clear_queue("mallory", session.id, None)
    assert (await _queued(engine, session.id)).queued == 1  # nothing changed


async def test_s2_an_unremembered_session_is_read_and_refused_for_another_principal(
    engine: Engine,
) -> None:
    _, session = await new_session(engine)
    engine.access.owners.clear()
    with pytest.raises(NotFound):
        await engine.enqueue("mallory", session.id, "theirs", None)
    assert session.id not in engine.access.owners  # a refusal remembers nothing
    with pytest.raises(NotFound):
        await engine.enqueue("mallory", str(uuid.uuid4()), "x", None)
    with pytest.raises(InvalidInput):
        await engine.enqueue("mallory", "not an id!", "x", None)
