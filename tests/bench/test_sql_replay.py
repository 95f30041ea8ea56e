"""P4's and P8's baseline (``bench/baseline.py``) replays exactly the SQL the ``setAutoRun``
mutation sent: the same statements, texts and parameters, in the same order and transactions.
Compared by what the driver itself reported for both (SQLite's trace callback, asyncpg's query
logger), so the baseline cannot silently drift from the engine. No timing."""

from __future__ import annotations

import json
from typing import Any

import pytest

for module in ("psutil", "websockets"):
    pytest.importorskip(module, reason="the bench extra is not installed")

from bench.common import ServerProcess, post_json  # noqa: E402
from bench.p4_http import REPLAY, plain_body, record_mutation  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _seen(recording: dict[str, Any]) -> list[list[str]]:
    return [[s["seen"] for s in tx["statements"]] for tx in recording["transactions"]]


async def _replayed(server: ServerProcess, sid: str, on: bool) -> dict[str, Any]:
    """What the baseline's own connection sent for one request (recorded the same way)."""
    await server.call("/bench/record/start")
    status, data = await post_json(server.port, REPLAY, plain_body(sid, on))
    recording: dict[str, Any] = await server.call("/bench/record/stop")
    assert status == 200, data
    return recording


async def test_the_baseline_replays_the_mutations_statements(database_url: str) -> None:
    async with ServerProcess(database_url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": 2}).encode())
        recorded, other = [s["id"] for s in setup["sessions"]]
        engine = await record_mutation(server, recorded)
        for on in (False, True):  # the baseline's connection is opened (and set up) once
            await post_json(server.port, REPLAY, plain_body(recorded, on))

        for name, on in (("off", False), ("on", True)):
            sent = engine[name]
            assert sent["unmatched"] == 0, sent  # every parameter recovered, none inlined
            texts = [  # a simple query may fold BEGIN or COMMIT in: ``SELECT …; COMMIT``
                part.split()[0].upper()
                for tx in sent["transactions"]
                for s in tx["statements"]
                for part in s["sql"].split(";")
                if part.strip()
            ]
            assert "BEGIN" in texts and "COMMIT" in texts
            # the policy and the revision: two statements, or one data-modifying WITH
            assert {"INSERT", "UPDATE"} <= set(texts) or "WITH" in texts
            # On the recorded session the replay is the very same statements and values.
            assert _seen(await _replayed(server, recorded, on)) == _seen(sent)
            # On another session, the same with that session's id.
            expected = [[s.replace(recorded, other) for s in tx] for tx in _seen(sent)]
            assert _seen(await _replayed(server, other, on)) == expected
